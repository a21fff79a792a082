//! A service that goes down or stalls in the middle of a transfer: a TCP proxy on the host, at
//! the address pods reach the host by, in front of a real service (say, the object store). A
//! test points one client at the proxy, arms it to cut (or hold) every connection once so many
//! bytes went towards the service, and brings it back when it chooses; everything else keeps
//! using the service directly, so suites that share it are not disturbed. A hold gives a test
//! a transfer that is certainly under way, for as long as it needs to do something to it.
//!
//! ```no_run
//! # async fn f(store: std::net::SocketAddr) -> anyhow::Result<()> {
//! let outage = valkey_e2e::outage::Outage::start(store).await?;
//! let endpoint = outage.endpoint();   // http://198.18.0.1:<port>, for a pod
//! outage.cut_after(4 << 20);          // after 4 MiB towards the store: connections reset, down
//! // ... the client fails ...
//! outage.restore();                   // up again
//! outage.hold_after(2 << 20);         // after 2 MiB: nothing moves, connections stay open
//! outage.restore();                   // held bytes move on
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::faults::APISERVER_IP;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Up,
    /// Up until this many more bytes went towards the service, then down.
    CutAfter(u64),
    /// Every connection is closed as soon as it is accepted.
    Down,
    /// Up until this many more bytes went towards the service, then held.
    HoldAfter(u64),
    /// Connections stay open and nothing moves towards the service (a store that stopped
    /// answering mid-request) until [`Outage::restore`].
    Held,
}

/// What happens to bytes on their way to the service.
enum Pass {
    Forward,
    Hold,
    Cut,
}

struct State {
    mode: Mutex<Mode>,
    /// Bytes forwarded towards the service, all connections together.
    forwarded: Mutex<u64>,
    /// Bumped when the service goes down: every live connection ends at once.
    cuts: watch::Sender<u64>,
}

impl State {
    /// Counts `n` bytes towards the service, unless they cross an armed cut (the service is
    /// then down and they are not forwarded) or hold (they wait).
    fn pass(&self, n: usize) -> Pass {
        let mut mode = self.mode.lock().unwrap();
        let n = n as u64;
        match *mode {
            Mode::Down => return Pass::Cut,
            Mode::Held => return Pass::Hold,
            Mode::CutAfter(left) if n >= left => {
                *mode = Mode::Down;
                self.cuts.send_modify(|c| *c += 1);
                return Pass::Cut;
            }
            Mode::HoldAfter(left) if n >= left => {
                *mode = Mode::Held;
                return Pass::Hold;
            }
            Mode::CutAfter(left) => *mode = Mode::CutAfter(left - n),
            Mode::HoldAfter(left) => *mode = Mode::HoldAfter(left - n),
            Mode::Up => {}
        }
        *self.forwarded.lock().unwrap() += n;
        Pass::Forward
    }
}

/// The proxy; stops when dropped.
pub struct Outage {
    addr: SocketAddr,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

impl Outage {
    /// A proxy to `service`, listening where pods reach the host.
    pub async fn start(service: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((APISERVER_IP, 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            mode: Mutex::new(Mode::Up),
            forwarded: Mutex::new(0),
            cuts: watch::channel(0).0,
        });
        let accepting = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *accepting.mode.lock().unwrap() == Mode::Down {
                    drop(client);
                    continue;
                }
                tokio::spawn(relay(client, service, accepting.clone()));
            }
        });
        Ok(Outage {
            addr,
            state,
            accept,
        })
    }

    /// The proxy as an HTTP endpoint for a pod.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Once `bytes` more went towards the service, every connection is reset and new ones are
    /// refused until [`Outage::restore`].
    pub fn cut_after(&self, bytes: u64) {
        *self.state.mode.lock().unwrap() = Mode::CutAfter(bytes);
    }

    /// Once `bytes` more went towards the service, nothing more moves towards it (connections
    /// stay open, new ones are accepted and held too) until [`Outage::restore`].
    pub fn hold_after(&self, bytes: u64) {
        *self.state.mode.lock().unwrap() = Mode::HoldAfter(bytes);
    }

    pub fn is_held(&self) -> bool {
        *self.state.mode.lock().unwrap() == Mode::Held
    }

    pub fn is_down(&self) -> bool {
        *self.state.mode.lock().unwrap() == Mode::Down
    }

    /// The service is reachable again (held bytes move on).
    pub fn restore(&self) {
        *self.state.mode.lock().unwrap() = Mode::Up;
    }

    /// Bytes forwarded towards the service so far.
    pub fn forwarded(&self) -> u64 {
        *self.state.forwarded.lock().unwrap()
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One connection, both ways, until either side closes or the service goes down (then both
/// sockets are dropped with data unread: the client sees a reset, as from a crashed server).
async fn relay(client: TcpStream, service: SocketAddr, state: Arc<State>) {
    let mut cuts = state.cuts.subscribe();
    let Ok(server) = TcpStream::connect(service).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let towards = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from_client.read(&mut buf).await?;
            if n == 0 {
                return to_server.shutdown().await;
            }
            loop {
                match state.pass(n) {
                    Pass::Forward => break,
                    Pass::Cut => return Err(std::io::Error::other("cut")),
                    Pass::Hold => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                }
            }
            to_server.write_all(&buf[..n]).await?;
        }
    };
    let back = tokio::io::copy(&mut from_server, &mut to_client);
    tokio::select! {
        _ = async { tokio::try_join!(towards, back) } => {}
        _ = cuts.changed() => {}
    }
}
