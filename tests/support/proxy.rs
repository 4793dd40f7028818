//! A delaying TCP proxy on loopback: what a slow link (a node in another data
//! centre) looks like to the client. Each direction has its own delay, which
//! a test can change while connections are open; bytes keep their order.
//! Its upstream can be switched ([`DelayProxy::switch_to`]): what a managed
//! service's primary endpoint does in a failover. With jitter
//! ([`DelayProxy::jitter`]), each chunk's delay is drawn around the set
//! one, and a chunk never overtakes the one before it (TCP keeps order).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A proxy from a free loopback port to `127.0.0.1:upstream` (or another
/// host's port: [`start_to`](Self::start_to)). Stops (and
/// closes every connection) when dropped.
pub struct DelayProxy {
    port: u16,
    to_server: Arc<AtomicU64>,
    to_client: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    upstream: Arc<AtomicU16>,
    /// Each chunk's delay is drawn from the set one ± this, in ms.
    jitter: Arc<AtomicU64>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    accepter: Option<std::thread::JoinHandle<()>>,
}

impl DelayProxy {
    /// A proxy to `upstream` that delays each direction by `one_way`.
    pub fn start(upstream: u16, one_way: Duration) -> Self {
        Self::start_to(Ipv4Addr::LOCALHOST.into(), upstream, one_way)
    }

    /// A proxy to `host:upstream` (a server in a test network's host, say)
    /// that delays each direction by `one_way`.
    pub fn start_to(host: IpAddr, upstream: u16, one_way: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let millis = |delay: Duration| Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let (to_server, to_client) = (millis(one_way), millis(one_way));
        let stop = Arc::new(AtomicBool::new(false));
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let upstream = Arc::new(AtomicU16::new(upstream));
        let jitter = Arc::new(AtomicU64::new(0));
        let accepter = {
            let (to_server, to_client) = (to_server.clone(), to_client.clone());
            let (stop, sockets, upstream) = (stop.clone(), sockets.clone(), upstream.clone());
            let jitter = jitter.clone();
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(server) = TcpStream::connect((host, upstream.load(Ordering::SeqCst)))
                    else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    {
                        let mut open = sockets.lock().unwrap();
                        open.push(client.try_clone().unwrap());
                        open.push(server.try_clone().unwrap());
                    }
                    pump(
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        (to_server.clone(), jitter.clone()),
                    );
                    pump(server, client, (to_client.clone(), jitter.clone()));
                }
            })
        };
        DelayProxy {
            port,
            to_server,
            to_client,
            stop,
            upstream,
            jitter,
            sockets,
            accepter: Some(accepter),
        }
    }

    /// Draws each chunk's delay from the set one ± `jitter` from now on
    /// (never below zero, never overtaking the chunk before).
    pub fn jitter(&self, jitter: Duration) {
        self.jitter
            .store(jitter.as_millis() as u64, Ordering::SeqCst);
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Points the proxy at `upstream` from now on, and closes every open
    /// connection (they led to the old server): a failover behind a stable
    /// address.
    pub fn switch_to(&self, upstream: u16) {
        self.upstream.store(upstream, Ordering::SeqCst);
        for socket in self.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// Delays requests (client to server) by `delay` from now on.
    pub fn delay_requests(&self, delay: Duration) {
        self.to_server
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Delays replies (server to client) by `delay` from now on.
    pub fn delay_replies(&self, delay: Duration) {
        self.to_client
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(accepter) = self.accepter.take() {
            let _ = accepter.join();
        }
        for socket in self.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// Copies `from` to `to`, each chunk `delay` (± its jitter) after it
/// arrived, never before the chunk ahead of it: a reader thread stamps the
/// chunks, a writer thread sends each at its time.
fn pump(mut from: TcpStream, mut to: TcpStream, (delay, jitter): (Arc<AtomicU64>, Arc<AtomicU64>)) {
    let (chunks, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 * 1024];
        let mut last = Instant::now();
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => return, // dropping `chunks` ends the writer
                Ok(n) => {
                    let (base, spread) = (
                        delay.load(Ordering::SeqCst) as i64,
                        jitter.load(Ordering::SeqCst) as i64,
                    );
                    let drawn = match spread {
                        0 => base,
                        _ => base + rand::random_range(-spread..=spread),
                    };
                    let at = Instant::now() + Duration::from_millis(drawn.max(0) as u64);
                    last = last.max(at);
                    if chunks.send((last, buffer[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (at, chunk) in due {
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
