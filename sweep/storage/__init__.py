"""Where a sweep's outputs live: a directory every node mounts, or a place in an S3-compatible bucket.

out_dir.py is `--out` as the driver sees it (a directory, or a bucket's place and the driver's local copy of it);
buckets.py is s3:// places and the Mirror that keeps a local directory in step with one; copies.py is how a Tune
trial opens its pack's places (in place, or in working copies), which the sweep hands to
trainables.trainable.run_trial: trainables know the protocol they use, never this package. scratch.py names the
directories private to one process (working copies, the driver's copy) and clears those of processes that are gone.
"""
