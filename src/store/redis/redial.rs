//! A single server's connection that is dialled again when it breaks (the server restarted,
//! a proxy dropped it), after a short jittered backoff, so that one restart does not cost a
//! process its store for the rest of its life.
//!
//! A request that failed because its connection broke is sent again on a new one only where
//! that is safe: reads, and writes that carry the owner's token (renew, release) or are
//! idempotent (raise a fence). Never a grant: a grant whose answer was lost may have been
//! made, and the engine's rules for an unheard grant (release it by token) take over.

use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, RedisResult};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The first pause after a failed dial; it doubles up to `BACKOFF_MAX`.
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Whether a request may be sent again on a new connection after its own broke.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    Safe,
    /// A grant: its answer may have been lost after it took effect.
    Never,
}

pub struct Redial {
    client: Client,
    config: AsyncConnectionConfig,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The connection in use and its generation (so a failure on an older one does not
    /// drop a newer one).
    conn: Option<(u64, MultiplexedConnection)>,
    generation: u64,
    /// Dials that failed in a row, and when the next may be tried.
    failures: u32,
    next_dial: Option<Instant>,
}

/// Whether an error means the connection itself is gone (not the request's own failure).
pub fn broken(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

impl Redial {
    /// Dial now: a server that cannot be reached when the process starts fails at once.
    pub async fn open(client: Client, config: AsyncConnectionConfig) -> RedisResult<Redial> {
        let conn = dial(&client, &config).await?;
        Ok(Redial {
            client,
            config,
            state: Mutex::new(State {
                conn: Some((0, conn)),
                ..State::default()
            }),
        })
    }

    /// Dial on first use (a cluster node learnt from the slot map).
    pub fn lazy(client: Client, config: AsyncConnectionConfig) -> Redial {
        Redial {
            client,
            config,
            state: Mutex::new(State::default()),
        }
    }

    /// The connection in use, dialling a new one if it broke (unless a dial failed moments
    /// ago: then fail at once, and let the caller's own pace decide when to ask again).
    async fn current(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let mut st = self.state.lock().await;
        if let Some((g, c)) = &st.conn {
            return Ok((*g, c.clone()));
        }
        if let Some(at) = st.next_dial
            && Instant::now() < at
        {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the connection broke and the server did not answer a new one yet",
            )));
        }
        match dial(&self.client, &self.config).await {
            Ok(c) => {
                st.generation += 1;
                st.failures = 0;
                st.next_dial = None;
                st.conn = Some((st.generation, c.clone()));
                Ok((st.generation, c))
            }
            Err(e) => {
                let pause = BACKOFF_MIN
                    .saturating_mul(1 << st.failures.min(8))
                    .min(BACKOFF_MAX);
                st.failures += 1;
                // Jittered, so that the clients of one restarted server do not dial in step.
                st.next_dial = Some(Instant::now() + pause.mul_f64(0.5 + crate::sys::random_f64()));
                Err(e)
            }
        }
    }

    /// Forget connection `generation`: the next request dials a new one.
    async fn drop_conn(&self, generation: u64) {
        let mut st = self.state.lock().await;
        if st.conn.as_ref().is_some_and(|(g, _)| *g == generation) {
            st.conn = None;
        }
    }

    /// Run `f` on the connection; if the connection broke under it, dial again and, where
    /// `retry` allows, run it once more on the new one.
    pub async fn run<T, F, Fut>(&self, retry: Retry, f: F) -> RedisResult<T>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (g, c) = self.current().await?;
        match f(c).await {
            Err(e) if broken(&e) => {
                self.drop_conn(g).await;
                if retry == Retry::Never {
                    return Err(e);
                }
                let (g, c) = self.current().await?;
                let r = f(c).await;
                if let Err(e) = &r
                    && broken(e)
                {
                    self.drop_conn(g).await;
                }
                r
            }
            r => r,
        }
    }
}

/// A new connection, answered once (PING). A server at its maxclients writes one error line
/// and closes, which the client library may take for the answer to its own setup (then the
/// next request finds a broken pipe): a dial that fails is asked about that on a bare
/// socket, so the failure says the server is full rather than unreachable.
pub async fn dial(
    client: &Client,
    config: &AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection> {
    let tried = async {
        let mut c = client
            .get_multiplexed_async_connection_with_config(config)
            .await?;
        redis::cmd("PING").query_async::<()>(&mut c).await?;
        Ok(c)
    };
    match tried.await {
        Err(e) if broken(&e) && full(client).await => Err(RedisError::from((
            redis::ErrorKind::Io,
            "the server closed the connection",
            FULL.to_string(),
        ))),
        r => r,
    }
}

/// What Redis says to a connection beyond its maxclients (`classify` knows it by this).
const FULL: &str = "max number of clients reached";

/// Whether the server greets a new bare connection with its maxclients error, unasked (only
/// over plain TCP: over TLS it would first need a handshake).
async fn full(client: &Client) -> bool {
    let redis::ConnectionAddr::Tcp(host, port) = client.get_connection_info().addr() else {
        return false;
    };
    let ask = async {
        let mut s = tokio::net::TcpStream::connect((host.as_str(), *port))
            .await
            .ok()?;
        let mut buf = [0u8; 64];
        let n = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await.ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).contains(FULL))
    };
    // A server with room says nothing until asked: the wait is all it costs, on a dial
    // that failed anyway.
    tokio::time::timeout(Duration::from_millis(300), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}
