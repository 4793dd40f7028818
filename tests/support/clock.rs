//! Servers whose wall clock steps: the server under test started with a
//! small `LD_PRELOAD` library (`clockshim.c`, built here with `cc` once per
//! test process) that adds an offset, read from a file, to `gettimeofday`,
//! `time` and `clock_gettime` of the `CLOCK_REALTIME` clocks, and leaves the
//! monotonic clocks alone. Redis expires keys by its wall clock, so a step
//! forward expires them early, as NTP stepping, a resumed VM or an
//! administrator would. (Debian's libfaketime recurses inside redis-server
//! 7.0 and kills it at start; the shim reads the real clock and its file
//! with raw system calls.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::netns::Host;
use super::{RedisServer, free_port};

/// The shim, built once per test process into Cargo's scratch dir for
/// tests (`CARGO_TARGET_TMPDIR`; the temp dir for an example), named by a
/// hash of its source: one file however many test processes ran, none left
/// in the temp dir.
fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/clockshim.c");
        let code = std::fs::read(&source).expect("read the clock shim's source");
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&code, &mut hasher);
        let dir = option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
        std::fs::create_dir_all(&dir).expect("shim dir");
        let name = format!(
            "quorlock-clockshim-{:016x}.so",
            std::hash::Hasher::finish(&hasher)
        );
        let library = dir.join(&name);
        if library.exists() {
            return library;
        }
        // Built under a name of this process's, then renamed: another test
        // process building it at the same time never loads half a file.
        let building = dir.join(format!("{name}.{}", std::process::id()));
        let built = Command::new("cc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&building)
            .arg(&source)
            .status()
            .unwrap_or_else(|err| {
                panic!("cc, to build the clock shim: {err}. Install it: apt-get install -y gcc")
            });
        assert!(built.success(), "building the clock shim failed");
        std::fs::rename(&building, &library).expect("rename the clock shim");
        library
    })
}

/// A server under test whose wall clock the test steps.
pub struct ClockServer {
    pub server: RedisServer,
    clock: Clock,
}

/// The clock of a [`ClockServer`], apart from the server (which a test may
/// kill, pause and restart: the clock shim stays with it).
#[derive(Clone)]
pub struct Clock {
    offset_file: PathBuf,
    url: String,
}

impl ClockServer {
    /// Starts a server on a free loopback port with the shim, its clock at
    /// the true time.
    pub fn start() -> ClockServer {
        ClockServer::with_shim(RedisServer::on_port(free_port(), &[]))
    }

    /// Starts a server with the shim inside `host` of a test network
    /// (`netns.rs`), with `extra_args`, its clock at the true time.
    pub fn start_in(host: &Host, extra_args: &[&str]) -> ClockServer {
        let mut args = vec!["--protected-mode", "no"];
        args.extend_from_slice(extra_args);
        let mut server = RedisServer::on_port(free_port(), &args);
        server.address = host.ip.to_string();
        server.netns = host.netns.clone();
        ClockServer::with_shim(server)
    }

    /// Starts `server` (not started yet) with the shim.
    fn with_shim(mut server: RedisServer) -> ClockServer {
        std::fs::create_dir_all(&server.dir).expect("server dir");
        let offset_file = server.dir.join("clock-offset-ms");
        std::fs::write(&offset_file, "0").expect("offset file");
        server.env = vec![
            ("LD_PRELOAD".into(), shim().display().to_string()),
            (
                "QUORLOCK_CLOCK_OFFSET_FILE".into(),
                offset_file.display().to_string(),
            ),
        ];
        server.spawn().expect("a server with the clock shim");
        let url = server.url();
        ClockServer {
            server,
            clock: Clock { offset_file, url },
        }
    }

    /// The server and its clock, apart.
    pub fn into_parts(self) -> (RedisServer, Clock) {
        (self.server, self.clock)
    }

    /// See [`Clock::set_offset`].
    pub fn set_offset(&self, offset_ms: i64) {
        self.clock.set_offset(offset_ms);
    }

    /// See [`Clock::offset_ms`].
    pub fn offset_ms(&self) -> i64 {
        self.clock.offset_ms()
    }
}

impl Clock {
    /// Sets the server's wall clock to the true time plus `offset_ms`
    /// (negative: behind), and waits until the server's `TIME` shows it.
    pub fn set_offset(&self, offset_ms: i64) {
        std::fs::write(&self.offset_file, offset_ms.to_string()).expect("offset file");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let shown = self.offset_ms();
            if (shown - offset_ms).abs() < 500 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the server's clock shows {shown} ms, not {offset_ms}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Writes `offset_ms` for the server to read, without waiting for it to
    /// show: for a server that is down and starts with it.
    pub fn write_offset(&self, offset_ms: i64) {
        std::fs::write(&self.offset_file, offset_ms.to_string()).expect("offset file");
    }

    /// How far ahead of this process's wall clock the server's runs, in ms.
    pub fn offset_ms(&self) -> i64 {
        let mut connection = redis::Client::open(self.url.as_str())
            .and_then(|client| client.get_connection())
            .expect("a connection to the clock server");
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut connection).expect("TIME");
        let ours = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970");
        secs * 1000 + micros / 1000 - i64::try_from(ours.as_millis()).expect("ms fit")
    }
}
