//! Integration tests of `lake-store` on real stores: a local folder, and LocalStack S3 (the
//! `#[ignore]`d tests, run by `scripts/test.sh`).

mod reader;

/// A fresh root for an S3 test: `s3://$LAKE_TEST_S3_BUCKET/<name>-<ulid>`.
pub(crate) fn s3_root(name: &str) -> String {
    let bucket = std::env::var("LAKE_TEST_S3_BUCKET")
        .expect("LAKE_TEST_S3_BUCKET is not set: run S3 tests through scripts/test.sh (it starts LocalStack)");
    format!("s3://{bucket}/{name}-{}", ulid::Ulid::new().to_string().to_lowercase())
}
