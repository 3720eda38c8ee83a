//! A server on a free loopback port (stopped when dropped), tiny models, and a raw HTTP/1.1
//! client (so that tests can send what no well-behaved client would).

use imgseq_serve::server::{serve, AppState};
use imgseq_serve::{ModelSpec, ServeConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tiny VQGAN fixture (f2, 32 codes; at side 32 its grid is 16x16).
pub fn tiny_vq() -> PathBuf {
    repo().join("tests/fixtures/vqgan/tiny.safetensors")
}

pub fn tiny_vit() -> PathBuf {
    repo().join("tests/fixtures/vit/tiny")
}

/// A random tiny GPT (4x4 tokens over the tiny VQ's 32 codes, 3 classes) saved in `dir`.
pub fn tiny_gpt(dir: &Path) -> PathBuf {
    tiny_gpt_grid(dir, 4, 4)
}

/// [`tiny_gpt`] with an `h`×`w` token grid.
pub fn tiny_gpt_grid(dir: &Path, h: usize, w: usize) -> PathBuf {
    use imgseq_gpt::config::{GptConfig, SeqLayout};
    let layout = SeqLayout {
        n_codes: 32,
        class_names: vec!["a".into(), "b".into(), "c".into()],
        h,
        w,
    };
    let vq = tiny_vq().display().to_string();
    let cfg = GptConfig::new_imgseq(&layout, 32, 2, 2, Some(vq));
    let vars = candle_nn::VarMap::new();
    let vb = candle_nn::VarBuilder::from_varmap(
        &vars,
        candle_core::DType::F32,
        &candle_core::Device::Cpu,
    );
    imgseq_gpt::model::Gpt2LMHeadModel::new(&cfg, vb).unwrap();
    let out = dir.join("gpt");
    imgseq_gpt::checkpoint::save(&out, &cfg, &imgseq_gpt::checkpoint::var_tensors(&vars)).unwrap();
    out
}

/// Settings for tests: tiny VQ (`vq`) and ViT (`vit`), small limits, short times.
pub fn config() -> ServeConfig {
    ServeConfig {
        models: vec![
            ModelSpec {
                name: "vq".into(),
                path: tiny_vq(),
            },
            ModelSpec {
                name: "vit".into(),
                path: tiny_vit(),
            },
        ],
        vq_size: Some(32),
        max_body_bytes: 1 << 20,
        max_pixels: 4_000_000,
        body_timeout: Duration::from_secs(1),
        header_timeout: Duration::from_secs(5),
        deadline: Duration::from_secs(20),
        test_routes: true,
        ..ServeConfig::default()
    }
}

pub struct Server {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    pub fn start(cfg: ServeConfig) -> Self {
        let (state, _workers) = AppState::load(cfg).unwrap();
        let state = Arc::new(state);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(l.local_addr().unwrap()).unwrap();
                serve(l, state, async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
            });
        });
        let addr = addr_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        Self {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// Asks the server to stop (it drains in-flight requests) without waiting.
    pub fn begin_stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    pub fn get(&self, path: &str) -> Reply {
        request(self.addr, "GET", path, &[], b"")
    }

    /// The status of a GET, or 0 when the connection gave no answer.
    pub fn get_status(&self, path: &str) -> u16 {
        let mut s = match TcpStream::connect(self.addr) {
            Ok(s) => s,
            Err(_) => return 0,
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let head = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        let _ = s.write_all(head.as_bytes());
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        if raw.windows(4).any(|w| w == b"\r\n\r\n") {
            parse(&raw).status
        } else {
            0
        }
    }

    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        request(self.addr, "POST", path, headers, body)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.begin_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts a one-line JSON error with `status`; returns its message.
    pub fn error(&self, status: u16) -> String {
        let text = String::from_utf8_lossy(&self.body).into_owned();
        assert_eq!(self.status, status, "{text}");
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{text}"
        );
        assert_eq!(text.trim_end().lines().count(), 1, "{text}");
        self.json()["error"].as_str().unwrap().to_string()
    }
}

/// Sends one request on a new connection (`Connection: close`) and reads the whole answer.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body);
    read_reply(&mut s)
}

/// Reads an answer until the server closes the connection.
pub fn read_reply(s: &mut TcpStream) -> Reply {
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse(&raw)
}

pub fn parse(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 4 + n..];
    }
}

/// A PNG of a smooth colour pattern.
pub fn png(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}
