//! What a node's URL asks of its connection's handshake (quorlock's own
//! connection makes it for `redis://` nodes, as the `redis` crate would):
//! the database in the URL is the one locked in, and an ACL user signs in
//! with its name and password, or is refused with an error that says so.

mod support;

use std::time::Duration;

use quorlock::{Redlock, Unlocked};
use support::RedisServer;

const TTL: Duration = Duration::from_secs(10);

/// Whether `key` exists in database `db` of `server`.
fn exists_in(server: &RedisServer, db: i64, key: &[u8]) -> bool {
    let mut connection = server.connection();
    redis::cmd("SELECT")
        .arg(db)
        .query::<()>(&mut connection)
        .expect("SELECT");
    redis::cmd("EXISTS")
        .arg(key)
        .query::<bool>(&mut connection)
        .expect("EXISTS")
}

/// A URL that names database 3 locks there, and nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_urls_database_is_the_one_locked_in() {
    let server = RedisServer::start();
    let redlock = Redlock::new([format!("{}/3", server.url())]).unwrap();
    let guard = redlock.lock("handshake:db", TTL).await.unwrap();
    let key = guard.key().to_vec();
    assert!(exists_in(&server, 3, &key), "the key is in database 3");
    assert!(!exists_in(&server, 0, &key), "and not in database 0");
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    assert!(!exists_in(&server, 3, &key), "released there");
}

/// An ACL user signs in with its name and password (the server lists the
/// lock's connection as that user); a wrong password is refused, and the
/// error says it was the authentication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_signs_in_by_name() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all"][..])
        .query::<()>(&mut admin)
        .expect("ACL SETUSER");
    let at = format!("{}:{}", server.address(), server.port());
    let url = |password: &str| format!("redis://locker:{password}@{at}");
    let redlock = Redlock::new([url("secret")]).unwrap();
    let guard = redlock.lock("handshake:user", TTL).await.unwrap();
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut admin)
        .expect("CLIENT LIST");
    assert!(clients.contains("user=locker"), "{clients}");
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);

    let refused = Redlock::builder([url("wrong")])
        .acquire_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let err = refused.try_lock("handshake:user", TTL).await.unwrap_err();
    assert!(
        err.is_unavailable(),
        "a refused sign-in is a failed node: {err}"
    );
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        source.is_some_and(|source| source.contains("authentication failed")),
        "{err:?}"
    );
}
