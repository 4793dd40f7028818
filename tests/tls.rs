//! TLS: `rediss://` nodes against `redis-server`s started with TLS on a CA
//! that the test makes with `openssl`.
#![cfg(feature = "tls")]

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use quorlock::{Redlock, Unlocked};
use support::{RedisServer, Scratch};

const TTL: Duration = Duration::from_secs(10);

/// Makes a CA and a server certificate for 127.0.0.1 in `dir`.
fn make_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap_or_else(|err| {
                panic!("openssl is needed for the TLS test ({err}): apt-get install -y openssl")
            });
        assert!(status.success(), "openssl {args:?} failed");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=quorlock test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
}

/// A directory for the certificates, removed when dropped.
fn scratch() -> Scratch {
    Scratch::new("tls")
}

/// With the test CA given to `redis::Client::build_with_tls`, three TLS nodes
/// lock and unlock; without it, the certificate is refused and each node is a
/// failed vote; with the CA trusted through `SSL_CERT_FILE`, plain
/// `rediss://` URLs work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_nodes_with_a_test_ca() {
    let dir = scratch();
    make_certificates(&dir);
    let nodes: Result<Vec<RedisServer>, _> = (0..3)
        .map(|_| {
            RedisServer::start_tls(
                &dir.join("server.crt"),
                &dir.join("server.key"),
                &dir.join("ca.crt"),
            )
        })
        .collect();
    let nodes = match nodes {
        Ok(nodes) => nodes,
        Err(support::NoTls(log)) => {
            let why = format!(
                "the server has no TLS ({})",
                log.lines().last().unwrap_or("")
            );
            return support::not_run("tls::rediss_nodes_with_a_test_ca", &why);
        }
    };
    let urls: Vec<String> = nodes
        .iter()
        .map(|node| format!("rediss://127.0.0.1:{}", node.port()))
        .collect();
    let ca = std::fs::read(dir.join("ca.crt")).unwrap();

    // 1. Clients built with the CA.
    let clients = urls.iter().map(|url| {
        redis::Client::build_with_tls(
            url.as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.clone()),
            },
        )
        .unwrap()
    });
    let redlock = quorlock::RedlockBuilder::from_clients(clients)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = redlock.lock("tls:resource", TTL).await.unwrap();
    assert!(
        redlock
            .try_lock("tls:resource", TTL)
            .await
            .unwrap_err()
            .is_contended()
    );
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);

    // 2. Without the CA the server's certificate is refused.
    let untrusting = Redlock::builder(&urls)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let err = untrusting.try_lock("tls:resource", TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "got {err}");

    // 3. Plain rediss:// URLs, the CA trusted through SSL_CERT_FILE.
    // SAFETY: this binary's only test; no other thread reads the environment now.
    unsafe { std::env::set_var("SSL_CERT_FILE", dir.join("ca.crt")) };
    let redlock = Redlock::builder(&urls)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = redlock.lock("tls:resource", TTL).await.unwrap();
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    let _ = std::fs::remove_dir_all(&dir);
}
