//! A Sentinel-managed primary as a node. A Sentinel node is resolved each time a connection to it is made (the
//! first, and each after a break): the Sentinels are asked in parallel
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`), the first answer naming a primary
//! wins, and the connection goes there. A failover follows by itself:
//! Sentinel closes the clients of the servers it reconfigures, the closed
//! connection is replaced at once (see `connection/`), the Sentinels are
//! asked again, and the new primary's check holds it back as a failover
//! (see `standing/`). A server that answers as a replica (a Sentinel that
//! has not heard of the failover yet, or a primary demoted since) fails the
//! check, and the node is resolved again at the next attempt.
//!
//! # A failover the connection does not see (split brain)
//!
//! Sentinel closes the clients of the servers it reconfigures, but it
//! cannot reach an old primary cut off from it: that primary goes on
//! serving the clients that still reach it, as a primary, while the
//! Sentinels promote its replica. A holder there would extend its lock on
//! the old primary while another client is granted it on the new one. So
//! the background reading (once a second, see `standing/`) asks each
//! Sentinel node's Sentinels which primary they name; where it is not the
//! one the connection in use went to, the connection is dropped and made
//! again, to the primary they name, whose check judges it like any other
//! failover: held back for the grace, the locks held on the node told
//! (`LostReason::ServerChanged`).
//!
//! *Safety*: it only drops a connection, so it can only withhold a grant.
//! It tells a holder that still reaches one Sentinel within about a second
//! of the Sentinels naming the new primary, and another client counts that
//! primary only a grace (at least the longest TTL) after its own first
//! sight of it, so the holder is told first. *Uncovered*: a holder that
//! reaches the old primary and no Sentinel cannot tell; there the server's
//! `min-replicas-to-write 1` (the old primary refuses writes once its
//! replicas are gone: the holder's next extension fails) or
//! `RedlockBuilder::replica_acks(1)` closes it (see docs/operations.md).
//! Sentinels that disagree (one has not heard of the failover yet) can make
//! the node reconnect more than once during a failover, each time judged
//! by its check.
//!
//! # The URL
//!
//! `redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>[/<db>][?sentinel_username=…&sentinel_password=…]`
//!
//! - The user and password before `@` are the **data nodes'** (the
//!   primary's `AUTH`).
//! - `sentinel_username` and `sentinel_password` are the **Sentinels'**
//!   (`requirepass` in their configuration); none by default.
//! - A host without a port is on Sentinel's port, 26379.
//! - Percent-encoding is decoded, as in `redis://` URLs.

use std::sync::Arc;
use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

use super::first_answer::first_answer;
use crate::answer::NodeErrorKind;

/// The URL scheme of a Sentinel-managed node.
pub(crate) const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// Sentinel's default port.
pub(super) const SENTINEL_PORT: u16 = 26379;

/// A Sentinel-managed primary as a node, built from its Sentinels'
/// addresses and its master name: the builder form of a
/// `redis+sentinel://` URL (see [`url`](Self::url)), with the data nodes'
/// and the Sentinels' credentials.
///
/// ```
/// use quorlock::{Redlock, SentinelNode};
///
/// let node = SentinelNode::new(["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"], "orders")
///     .password("p@ss")
///     .sentinel_password("sentinel-secret");
/// assert_eq!(
///     node.url(),
///     "redis+sentinel://:p%40ss@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/orders\
///      ?sentinel_password=sentinel-secret"
/// );
/// let redlock = Redlock::new([node.url()])?;
/// # Ok::<(), quorlock::BuildError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelNode {
    pub(super) sentinels: Vec<String>,
    pub(super) master: String,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) sentinel_username: Option<String>,
    pub(super) sentinel_password: Option<String>,
    pub(super) db: Option<i64>,
}

impl SentinelNode {
    /// The primary that the Sentinels at `sentinels` (`host:port`, or a host
    /// on port 26379) know as `master`.
    pub fn new<I, S>(sentinels: I, master: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        SentinelNode {
            sentinels: sentinels
                .into_iter()
                .map(|s| s.as_ref().to_owned())
                .collect(),
            master: master.into(),
            username: None,
            password: None,
            sentinel_username: None,
            sentinel_password: None,
            db: None,
        }
    }

    /// The data nodes' ACL user (the primary's `AUTH user password`).
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The data nodes' password (`requirepass`, or the ACL user's).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The Sentinels' ACL user.
    pub fn sentinel_username(mut self, username: impl Into<String>) -> Self {
        self.sentinel_username = Some(username.into());
        self
    }

    /// The Sentinels' password (`requirepass` in their configuration).
    pub fn sentinel_password(mut self, password: impl Into<String>) -> Self {
        self.sentinel_password = Some(password.into());
        self
    }

    /// The database number on the data nodes (default 0).
    pub fn db(mut self, db: i64) -> Self {
        self.db = Some(db);
        self
    }

    /// The node's `redis+sentinel://` URL, credentials percent-encoded: what
    /// [`Redlock::builder`](crate::Redlock::builder) takes.
    pub fn url(&self) -> String {
        let mut url = SENTINEL_SCHEME.to_owned();
        if self.username.is_some() || self.password.is_some() {
            url.push_str(&encode(self.username.as_deref().unwrap_or_default()));
            url.push(':');
            url.push_str(&encode(self.password.as_deref().unwrap_or_default()));
            url.push('@');
        }
        url.push_str(&self.sentinels.join(","));
        url.push('/');
        url.push_str(&encode(&self.master));
        if let Some(db) = self.db {
            url.push_str(&format!("/{db}"));
        }
        let query: Vec<String> = [
            ("sentinel_username", &self.sentinel_username),
            ("sentinel_password", &self.sentinel_password),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some(format!("{name}={}", encode(value.as_deref()?))))
        .collect();
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query.join("&"));
        }
        url
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(super) fn encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Percent-decodes `text` (a query value); `None` if it is not valid UTF-8
/// once decoded.
pub(super) fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok());
        match (
            bytes[at],
            hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()),
        ) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                at += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(decoded).ok()
}

/// A Sentinel-managed primary: its Sentinels and master name, and how to
/// connect to the primary once they named it.
#[derive(Debug)]
pub(crate) struct Sentinels {
    /// One client per Sentinel (its address, the Sentinels' credentials).
    pub(super) sentinels: Vec<Client>,
    pub(super) master: String,
    /// The data nodes' credentials and database; the address is set when
    /// the Sentinels name the primary.
    pub(super) data: ConnectionInfo,
    pub(super) name: Arc<str>,
}

impl Sentinels {
    /// Parses a `redis+sentinel://` URL (see the module docs).
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix(SENTINEL_SCHEME)
            .ok_or_else(|| format!("a Sentinel URL starts with {SENTINEL_SCHEME}"))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest
            .split_once('/')
            .ok_or("no master name: the URL ends with /<master-name>")?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (master, db) = path.split_once('/').unwrap_or((path, ""));
        let master = decode(master).ok_or("a master name that is not UTF-8")?;
        if master.is_empty() {
            return Err("no master name: the URL ends with /<master-name>".into());
        }
        let sentinel_auth = sentinel_userinfo(query)?;
        let sentinels = hosts
            .split(',')
            .map(|host| sentinel_client(host, sentinel_auth.as_deref()))
            .collect::<Result<Vec<Client>, String>>()?;
        let userinfo = userinfo.map_or_else(String::new, |userinfo| format!("{userinfo}@"));
        // The primary's address is unknown until the Sentinels name it.
        let data = format!("redis://{userinfo}127.0.0.1:1/{db}")
            .into_connection_info()
            .map_err(|err| format!("the data nodes' credentials or database: {err}"))?;
        let first = hosts.split(',').next().unwrap_or_default();
        Ok(Sentinels {
            sentinels,
            master: master.clone(),
            data,
            name: format!("{master}@{first}").into(),
        })
    }

    /// Asks every Sentinel for the primary (each within `timeout`); the
    /// first to name one wins. Fails, saying what each Sentinel answered,
    /// when none does.
    pub(super) async fn primary(&self, timeout: Duration) -> Result<Client, NodeErrorKind> {
        let master = &self.master;
        let (host, port) = first_answer(&self.sentinels, timeout, |sentinel| async move {
            ask(&sentinel, master).await
        })
        .await
        .map_err(|answers| {
            NodeErrorKind::Sentinel(format!(
                "no Sentinel named a primary for master {master:?} ({})",
                answers.join("; ")
            ))
        })?;
        let info = self.data.clone().set_addr(ConnectionAddr::Tcp(host, port));
        Client::open(info).map_err(|err| NodeErrorKind::Redis(Arc::new(err)))
    }
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME master` on one Sentinel.
pub(super) async fn ask(sentinel: &Client, master: &str) -> Result<(String, u16), String> {
    let mut connection = sentinel
        .get_multiplexed_async_connection()
        .await
        .map_err(|err| err.to_string())?;
    let reply: Value = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut connection)
        .await
        .map_err(|err| err.to_string())?;
    match reply {
        Value::Array(items) if items.len() == 2 => {
            let host: String = redis::from_redis_value(items[0].clone())
                .map_err(|_| format!("an address that is not text: {items:?}"))?;
            let port: String = redis::from_redis_value(items[1].clone())
                .map_err(|_| format!("a port that is not text: {items:?}"))?;
            let port = port
                .parse()
                .map_err(|_| format!("a port that is not a number: {port:?}"))?;
            Ok((host, port))
        }
        Value::Nil => Err(format!("knows no master named {master:?}")),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// The Sentinels' `user:password@` from the URL's query, if any.
pub(super) fn sentinel_userinfo(query: &str) -> Result<Option<String>, String> {
    let (mut user, mut password) = (None, None);
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        match pair.split_once('=') {
            Some(("sentinel_username", value)) => user = Some(value),
            Some(("sentinel_password", value)) => password = Some(value),
            _ => return Err(format!("unknown query parameter {pair:?}")),
        }
    }
    // Re-encoded for the `redis://` URL of each Sentinel.
    let value = |value: Option<&str>| {
        decode(value.unwrap_or_default())
            .map(|value| encode(&value))
            .ok_or_else(|| "a Sentinel credential that is not UTF-8".to_owned())
    };
    Ok(match (user, password) {
        (None, None) => None,
        (user, password) => Some(format!("{}:{}@", value(user)?, value(password)?)),
    })
}

/// The client of one Sentinel at `host` (`host:port`, or a host on
/// Sentinel's port).
pub(super) fn sentinel_client(host: &str, userinfo: Option<&str>) -> Result<Client, String> {
    if host.is_empty() {
        return Err("an empty Sentinel address".into());
    }
    let has_port = match host.rfind(']') {
        Some(bracket) => host[bracket..].contains(':'),
        None => host.contains(':'),
    };
    let address = if has_port {
        host.to_owned()
    } else {
        format!("{host}:{SENTINEL_PORT}")
    };
    Client::open(format!("redis://{}{address}", userinfo.unwrap_or_default()))
        .map_err(|err| format!("Sentinel address {host:?}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(sentinels: &Sentinels) -> Vec<String> {
        sentinels
            .sentinels
            .iter()
            .map(|client| client.get_connection_info().addr().to_string())
            .collect()
    }

    #[test]
    fn a_sentinel_url_names_its_sentinels_master_and_both_credentials() {
        let parsed = Sentinels::parse(
            "redis+sentinel://app:s%40cret@10.0.0.1:26380,10.0.0.2/orders/3?sentinel_password=pw",
        )
        .unwrap();
        assert_eq!(addrs(&parsed), ["10.0.0.1:26380", "10.0.0.2:26379"]);
        assert_eq!(parsed.master, "orders");
        assert_eq!(&*parsed.name, "orders@10.0.0.1:26380");
        let data = parsed.data.redis_settings();
        assert_eq!(data.username(), Some("app"));
        assert_eq!(data.password(), Some("s@cret"));
        assert_eq!(data.db(), 3);
        let sentinel = parsed.sentinels[0].get_connection_info();
        assert_eq!(sentinel.redis_settings().password(), Some("pw"));
        assert_eq!(sentinel.redis_settings().username(), None);
    }

    /// The builder form's URL parses back to what it was given, however odd
    /// the credentials.
    #[test]
    fn a_sentinel_node_built_in_code_round_trips_through_its_url() {
        let node = SentinelNode::new(["127.0.0.1:1", "127.0.0.1:2"], "my master")
            .username("app")
            .password("p@ss:/?&=%")
            .sentinel_username("watch")
            .sentinel_password("s3&n=t")
            .db(2);
        let parsed = Sentinels::parse(&node.url()).unwrap();
        assert_eq!(parsed.master, "my master");
        let data = parsed.data.redis_settings();
        assert_eq!(
            (data.username(), data.password()),
            (Some("app"), Some("p@ss:/?&=%"))
        );
        assert_eq!(data.db(), 2);
        let sentinel = parsed.sentinels[1].get_connection_info();
        let sentinel = sentinel.redis_settings();
        assert_eq!(
            (sentinel.username(), sentinel.password()),
            (Some("watch"), Some("s3&n=t"))
        );
        assert_eq!(addrs(&parsed), ["127.0.0.1:1", "127.0.0.1:2"]);
    }

    #[test]
    fn a_bad_sentinel_url_is_refused_saying_why() {
        for (url, why) in [
            ("redis+sentinel://127.0.0.1:26379", "no master name"),
            ("redis+sentinel://127.0.0.1:26379/", "no master name"),
            ("redis+sentinel://,127.0.0.1/m", "empty Sentinel address"),
            (
                "redis+sentinel://127.0.0.1/m?password=x",
                "unknown query parameter",
            ),
            ("redis+sentinel://127.0.0.1:notaport/m", "Sentinel address"),
        ] {
            let err = Sentinels::parse(url).expect_err(url);
            assert!(err.contains(why), "{url}: {err}");
        }
    }
}
