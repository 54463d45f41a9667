"""s3:// places (sweep/storage/buckets.Bucket): what a URI may and may not carry, and its round trip through a member's
dir (point ids hold '=' and ',')."""
import pytest

from sweep.storage.buckets import Bucket, is_remote, why
from trainables.errors import ConfigError


def test_a_uri_names_bucket_prefix_endpoint_and_region_and_round_trips_through_a_members_dir():
    bucket = Bucket.parse("s3://sweeps/team/run-1?endpoint_override=http://127.0.0.1:9000&region=eu-west-1")
    assert (bucket.name, bucket.prefix, bucket.endpoint, bucket.region) == (
        "sweeps", "team/run-1", "http://127.0.0.1:9000", "eu-west-1")
    member = bucket.child("trials", "low=3,high=15,seed=0")
    assert Bucket.parse(member.uri) == member and member.path() == "sweeps/team/run-1/trials/low=3,high=15,seed=0"
    assert is_remote(member.uri) and not is_remote("/abs/runs/x") and not is_remote("runs/s3")


def test_the_endpoint_comes_from_the_environment_when_the_uri_has_none(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    bucket = Bucket.parse("s3://sweeps/run")
    assert bucket.endpoint == "http://127.0.0.1:9000"
    assert "endpoint_override=http" in bucket.uri  # written into the URI: a node needs only credentials


@pytest.mark.parametrize("uri, reason", [
    ("s3://sweeps/run?secret_key=abc123", "carry no credentials"),
    ("s3://sweeps/run?access_key=AKIA&endpoint_override=http://h:1", "carry no credentials"),
    ("s3://sweeps", "not the bucket's root"),
    ("s3://sweeps/", "not the bucket's root"),
    ("s3://sweeps/a/../b", "not the bucket's root"),
    ("s3://sweeps/run?endpoint=http://h:1", "unknown setting 'endpoint'"),
    ("gs://sweeps/run", "is not an s3://bucket/prefix URI"),
])
def test_a_bad_uri_is_refused_naming_the_option_and_never_echoing_a_secret(uri, reason):
    with pytest.raises(ConfigError) as error:
        Bucket.parse(uri)
    assert error.value.key == "--out" and reason in error.value.reason
    assert "abc123" not in str(error.value)


@pytest.mark.parametrize("message, says", [
    ("When getting information for bucket 'b': AWS Error ACCESS_DENIED during HeadBucket operation", "access denied"),
    ("AWS Error NETWORK_CONNECTION during HeadBucket operation: curlCode: 7, Couldn't connect", "does not answer"),
    ("AWS Error UNKNOWN (HTTP status 500) during HeadBucket operation: boom (Request ID: x)", "boom"),
])
def test_s3_errors_read_as_what_to_check(message, says):
    assert says in why(message)
