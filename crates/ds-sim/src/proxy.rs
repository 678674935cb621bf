//! A loopback TCP proxy the simulation controls: `down()` drops every open
//! connection and refuses new ones until `up()` — a network partition of
//! whatever connects through it, or a server that went away. In front of
//! MySQL/MariaDB it also records the connection id the server gives each
//! connection (from the server's handshake packet), so that a row change a
//! trigger records with `CONNECTION_ID()` can be traced to the client that
//! connected through this proxy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A MySQL connection id the server handed to a client of a proxy, and when
/// (seconds since the epoch).
#[derive(Debug, Clone)]
pub struct ConnSeen {
    pub conn_id: u32,
    pub label: String,
    pub at: f64,
}

pub type ConnLog = Arc<Mutex<Vec<ConnSeen>>>;

pub struct Proxy {
    pub port: u16,
    down: Arc<AtomicBool>,
    kill: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

/// The connection id in a MySQL protocol-10 initial handshake payload:
/// protocol version byte, NUL-terminated server version, then the id as a
/// little-endian u32.
pub fn handshake_conn_id(payload: &[u8]) -> Option<u32> {
    if payload.first() != Some(&10) {
        return None;
    }
    let nul = payload[1..].iter().position(|b| *b == 0)? + 1;
    let id = payload.get(nul + 1..nul + 5)?;
    Some(u32::from_le_bytes([id[0], id[1], id[2], id[3]]))
}

fn now() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1e6
}

impl Proxy {
    /// A plain proxy to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Proxy> {
        Proxy::start_with(upstream, None).await
    }

    /// A proxy that, when `mysql` is given, records each connection's MySQL
    /// connection id under `label`.
    pub async fn start_with(
        upstream: &str,
        mysql: Option<(String, ConnLog)>,
    ) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let down = Arc::new(AtomicBool::new(false));
        let (kill, kill_rx) = watch::channel(0u64);
        let upstream = upstream.to_string();
        let d = down.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if d.load(Ordering::SeqCst) {
                    let _ = inbound.shutdown().await;
                    continue;
                }
                let up = upstream.clone();
                let mut rx = kill_rx.clone();
                rx.mark_unchanged();
                let mysql = mysql.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&up).await else {
                        return;
                    };
                    if let Some((label, log)) = mysql {
                        // The server speaks first: read its handshake packet,
                        // note the id, pass it on unchanged.
                        let mut head = [0u8; 4];
                        if outbound.read_exact(&mut head).await.is_err() {
                            return;
                        }
                        let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
                        let mut payload = vec![0u8; len];
                        if outbound.read_exact(&mut payload).await.is_err() {
                            return;
                        }
                        if let Some(id) = handshake_conn_id(&payload) {
                            log.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(ConnSeen {
                                    conn_id: id,
                                    label,
                                    at: now(),
                                });
                        }
                        if inbound.write_all(&head).await.is_err()
                            || inbound.write_all(&payload).await.is_err()
                        {
                            return;
                        }
                    }
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = rx.changed() => {}
                    }
                });
            }
        });
        Ok(Proxy {
            port,
            down,
            kill,
            task,
        })
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.kill.send_modify(|n| *n += 1);
    }

    pub fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.kill.send_modify(|n| *n += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_id_is_read_from_a_handshake() {
        let mut p = vec![10u8];
        p.extend_from_slice(b"10.11.19-MariaDB\0");
        p.extend_from_slice(&1234u32.to_le_bytes());
        p.extend_from_slice(b"salt....");
        assert_eq!(handshake_conn_id(&p), Some(1234));
        assert_eq!(handshake_conn_id(&[9, 0, 1, 2, 3, 4]), None);
        assert_eq!(handshake_conn_id(&[10, b'x']), None);
    }
}
