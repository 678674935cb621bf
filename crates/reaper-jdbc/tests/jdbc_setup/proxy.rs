//! A loopback TCP proxy in front of a test database, to take the database
//! away without touching the shared server: `stop` resets every connection
//! and refuses new ones, `pause` keeps connections open but forwards nothing
//! (a network that stopped answering), `resume` undoes either.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Proxy {
    port: u16,
    target: String,
    paused: watch::Sender<bool>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// `scheme://user:pw@host:port/rest` → (`scheme://user:pw@`, `host:port`, `/rest`).
pub fn split_url(url: &str) -> (String, String, String) {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (auth, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (cred, host) = match auth.rsplit_once('@') {
        Some((c, h)) => (format!("{c}@"), h.to_string()),
        None => (String::new(), auth.to_string()),
    };
    (format!("{scheme}://{cred}"), host, tail.to_string())
}

impl Proxy {
    /// A proxy on a free loopback port to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (paused, _) = watch::channel(false);
        let p = Proxy {
            port,
            target: target.to_string(),
            paused,
            tasks: Arc::new(Mutex::new(Vec::new())),
        };
        p.serve(listener);
        p
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url_for(&self, url: &str) -> String {
        let (head, _, tail) = split_url(url);
        format!("{head}127.0.0.1:{}{tail}", self.port)
    }

    fn serve(&self, listener: TcpListener) {
        let target = self.target.clone();
        let tasks = self.tasks.clone();
        let paused = self.paused.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let target = target.clone();
                let paused = paused.subscribe();
                let conn = tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&target).await {
                        pipe(client, server, paused).await;
                    }
                });
                tasks.lock().unwrap().push(conn);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    /// Resets every connection and refuses new ones.
    pub fn stop(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// Listens again on the same port (after `stop`) and forwards again
    /// (after `pause`).
    pub async fn resume(&self) {
        self.paused.send_replace(false);
        if self.tasks.lock().unwrap().is_empty() {
            let mut tries = 0;
            let listener = loop {
                match TcpListener::bind(("127.0.0.1", self.port)).await {
                    Ok(l) => break l,
                    Err(_) if tries < 50 => {
                        tries += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("rebinding the proxy's port: {e}"),
                }
            };
            self.serve(listener);
        }
    }

    /// Keeps connections open but forwards nothing until `resume`.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn pipe(mut a: TcpStream, mut b: TcpStream, mut paused: watch::Receiver<bool>) {
    let (mut ar, mut aw) = a.split();
    let (mut br, mut bw) = b.split();
    let mut x = vec![0u8; 16 * 1024];
    let mut y = vec![0u8; 16 * 1024];
    loop {
        let is_paused = *paused.borrow();
        if is_paused && paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        tokio::select! {
            r = ar.read(&mut x) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => if bw.write_all(&x[..n]).await.is_err() { return },
            },
            r = br.read(&mut y) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => if aw.write_all(&y[..n]).await.is_err() { return },
            },
            _ = paused.changed() => {}
        }
    }
}
