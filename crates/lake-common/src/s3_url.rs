//! HTTP(S) URLs of Amazon S3 endpoints, which name `s3://bucket/key` objects.
//!
//! The forms of the S3 user guide ("Methods for accessing a bucket", "Virtual hosting of
//! buckets", dual-stack, Transfer Acceleration and website endpoints): virtual-hosted style
//! `<bucket>.s3.amazonaws.com/key`, `<bucket>.s3.<region>.amazonaws.com/key`,
//! `<bucket>.s3-<region>.amazonaws.com/key`, `<bucket>.s3.dualstack.<region>.amazonaws.com/key`,
//! `<bucket>.s3-accelerate[.dualstack].amazonaws.com/key`,
//! `<bucket>.s3-website[-.]<region>.amazonaws.com/key`, and path style
//! `s3[.-]<region>.amazonaws.com/<bucket>/key` (also under `amazonaws.com.cn`). Bucket names may
//! contain dots, so the service label is the last `s3` label before the region.

/// What an HTTP(S) URL is, as an S3 location.
pub(crate) enum S3Url {
    /// Not an Amazon S3 endpoint: the segments, unchanged.
    Other(Vec<String>),
    /// `s3://bucket/key...`: the bucket and the key's segments.
    Bucket(String, Vec<String>),
    /// An S3 endpoint that names no bucket by itself (an access point, Object Lambda, Outposts):
    /// which bucket it reaches cannot be told.
    Unknowable,
}

fn service_label(label: &str) -> Option<bool> {
    // Some(true): names a bucket (by host or path); Some(false): an S3 endpoint without one.
    match label {
        "s3" | "s3-accelerate" | "s3-external-1" => Some(true),
        l if l.starts_with("s3-accesspoint") || l.starts_with("s3-object-lambda") || l.starts_with("s3-outposts") => {
            Some(false)
        }
        l if l.starts_with("s3-control") => Some(false),
        l if l.starts_with("s3-") => Some(true),
        _ => None,
    }
}

/// Classifies the URL `scheme://authority/segments` (authority lower-case, with a port when
/// one was given).
pub(crate) fn classify(scheme: &str, authority: &str, segments: Vec<String>) -> S3Url {
    if scheme != "http" && scheme != "https" {
        return S3Url::Other(segments);
    }
    let host = authority.to_ascii_lowercase();
    let Some(stem) = host.strip_suffix(".amazonaws.com").or_else(|| host.strip_suffix(".amazonaws.com.cn")) else {
        return S3Url::Other(segments);
    };
    let labels: Vec<&str> = stem.split('.').collect();
    let Some((at, names_bucket)) = labels.iter().enumerate().rev().find_map(|(i, l)| service_label(l).map(|b| (i, b)))
    else {
        return S3Url::Other(segments);
    };
    if !names_bucket {
        return S3Url::Unknowable;
    }
    if at > 0 {
        return S3Url::Bucket(labels[..at].join("."), segments);
    }
    let mut segments = segments.into_iter();
    match segments.next() {
        Some(bucket) => S3Url::Bucket(bucket, segments.collect()),
        None => S3Url::Other(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(scheme: &str, host: &str, path: &str) -> Option<(String, String)> {
        let segments = path.split('/').map(str::to_string).collect();
        match classify(scheme, host, segments) {
            S3Url::Bucket(b, k) => Some((b, k.join("/"))),
            _ => None,
        }
    }

    #[test]
    fn virtual_hosted_and_path_style_endpoints_name_buckets() {
        let want = Some(("my.bucket".to_string(), "lake/objects/U/a".to_string()));
        for host in [
            "my.bucket.s3.amazonaws.com",
            "my.bucket.s3.eu-west-1.amazonaws.com",
            "my.bucket.s3-eu-west-1.amazonaws.com",
            "my.bucket.s3.dualstack.eu-west-1.amazonaws.com",
            "my.bucket.s3-accelerate.amazonaws.com",
            "my.bucket.s3-accelerate.dualstack.amazonaws.com",
            "my.bucket.s3-website-eu-west-1.amazonaws.com",
            "my.bucket.s3.cn-north-1.amazonaws.com.cn",
        ] {
            assert_eq!(bucket("https", host, "lake/objects/U/a"), want, "{host}");
        }
        for host in ["s3.amazonaws.com", "s3.eu-west-1.amazonaws.com", "s3-eu-west-1.amazonaws.com"] {
            assert_eq!(bucket("http", host, "my.bucket/lake/objects/U/a"), want, "{host}");
        }
        assert_eq!(bucket("https", "my.s3.bucket.s3.amazonaws.com", "k"), Some(("my.s3.bucket".into(), "k".into())));
        assert!(bucket("https", "example.com", "my.bucket/k").is_none());
        assert!(bucket("gs", "my.bucket.s3.amazonaws.com", "k").is_none());
        assert!(matches!(
            classify("https", "ap-123.s3-accesspoint.eu-west-1.amazonaws.com", vec!["k".into()]),
            S3Url::Unknowable
        ));
    }
}
