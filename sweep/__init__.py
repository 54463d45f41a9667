import trainables  # noqa: F401 (first, before Ray and Tune are imported: its collector setting, trainables/__init__.py)
