//! What the examples share: the node URLs they run on.

/// The Redis node URLs named on the command line, else in `QUORLOCK_NODES`
/// (comma-separated). With none, prints `example`'s usage line and exits
/// with code 2.
pub fn node_urls(example: &str) -> Vec<String> {
    let mut urls: Vec<String> = std::env::args().skip(1).collect();
    if urls.is_empty() {
        urls = std::env::var("QUORLOCK_NODES")
            .unwrap_or_default()
            .split(',')
            .filter(|url| !url.is_empty())
            .map(str::to_owned)
            .collect();
    }
    if urls.is_empty() {
        eprintln!("usage: {example} REDIS_URL [REDIS_URL...]   (or set QUORLOCK_NODES)");
        std::process::exit(2);
    }
    urls
}
