import os
import uuid

import pytest


@pytest.fixture
def local_root(tmp_path):
    """A lake root in a fresh temporary folder."""
    return str(tmp_path / "lake")


@pytest.fixture
def s3_root():
    """A lake root under the LocalStack bucket scripts/test.sh starts (skipped without it)."""
    bucket = os.environ.get("LAKE_TEST_S3_BUCKET")
    if not bucket:
        pytest.skip("needs LocalStack S3: run scripts/test.sh")
    return f"s3://{bucket}/py-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray instance of 2 CPUs (started once per test module; workers inherit the
    environment, LocalStack's endpoint included). Skipped without Ray."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
