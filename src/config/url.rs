//! A node from its URL (a Sentinel or Cluster URL, or one the `redis`
//! crate opens), and a URL shown without its user info.

use std::sync::Arc;

use redis::Client;

use crate::error::BuildError;
use crate::target::{CLUSTER_SCHEME, ClusterSeeds, SENTINEL_SCHEME, Sentinels, Target};

/// A node from its URL: a `redis+sentinel://` one (see `target/`), or
/// one the `redis` crate opens.
pub(super) fn open_url(url: &str) -> Result<Target, BuildError> {
    let invalid = |reason: String| BuildError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    if url.starts_with("rediss+cluster://") {
        return Err(invalid(
            "TLS to Redis Cluster nodes is not supported yet: use redis+cluster://".into(),
        ));
    }
    if url.starts_with(CLUSTER_SCHEME) {
        return ClusterSeeds::parse(url)
            .map(|seeds| Target::Cluster(Arc::new(seeds)))
            .map_err(invalid);
    }
    if url.starts_with("rediss+sentinel://") {
        return Err(invalid(
            "TLS to Sentinel nodes is not supported yet: use redis+sentinel://".into(),
        ));
    }
    if url.starts_with(SENTINEL_SCHEME) {
        return Sentinels::parse(url)
            .map(|sentinels| Target::Sentinel(Arc::new(sentinels)))
            .map_err(invalid);
    }
    Client::open(url)
        .map(|client| Target::Fixed(Box::new(client)))
        .map_err(|err| invalid(err.to_string()))
}

/// Masks the user info (`user:password@`) of a URL for display.
pub(super) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| scheme_end + at);
    match url[scheme_end..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end], &url[scheme_end + at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redaction_masks_user_info_only() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("redis://:secret@host:1/2"),
            "redis://***@host:1/2"
        );
        assert_eq!(redact_url("rediss://u:p@ss@host"), "rediss://***@host");
        assert_eq!(redact_url("not a url"), "not a url");
    }
}
