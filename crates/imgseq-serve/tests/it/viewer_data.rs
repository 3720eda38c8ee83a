//! The viewer's data endpoints: the ViT's position-similarity matrix and GPT sampling
//! streamed row by row (each row a prefix of the final tokens, which equal `/v1/sample`'s;
//! stopped when the client goes away).

use crate::common::{config, tiny_gpt, tiny_gpt_grid, tiny_vit, Server};
use imgseq_serve::ModelSpec;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn positions_are_the_cosine_similarity_of_the_vits_patch_position_vectors() {
    let m = imgseq_vit::inference::Classifier::load(&tiny_vit()).unwrap();
    let pos = m.model.vit.embeddings.patch_positions().unwrap();
    let (n, d) = pos.dims2().unwrap();
    let pos: Vec<f32> = pos.flatten_all().unwrap().to_vec1().unwrap();
    let s = Server::start(config());
    let r = s.get("/v1/models/vit/positions");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(j["patches"], n);
    assert_eq!(j["side"].as_u64().unwrap().pow(2), n as u64);
    assert_eq!(j["cls_excluded"], true);
    let rows = j["similarity"].as_array().unwrap();
    assert_eq!(rows.len(), n);
    for (i, row) in rows.iter().enumerate() {
        let row = row.as_array().unwrap();
        assert_eq!(row.len(), n);
        for (k, v) in row.iter().enumerate() {
            let (a, b) = (&pos[i * d..(i + 1) * d], &pos[k * d..(k + 1) * d]);
            let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
            let want = dot / (norm(a) * norm(b));
            assert!((v.as_f64().unwrap() as f32 - want).abs() < 1e-5, "{i},{k}");
        }
    }
    let r = s.post("/v1/models/vit/positions", &[], b"");
    assert_eq!(r.status, 405);
    let r = request_get_npy(&s, "/v1/models/vit/positions");
    let a = imgseq_core::npy::parse_npy("answer", &r).unwrap();
    assert_eq!(a.shape, vec![n, n]);
    let e = s.get("/v1/models/vq/positions").error(400);
    assert!(e.contains("vit model"), "{e}");
    s.get("/v1/models/nope/positions").error(404);
    let m = String::from_utf8(s.get("/metrics").body).unwrap();
    assert!(
        m.contains("imgseq_requests_total{route=\"/v1/models/{name}/positions\",status=\"200\"} 2"),
        "{m}"
    );
}

fn request_get_npy(s: &Server, path: &str) -> Vec<u8> {
    crate::common::request(s.addr, "GET", path, &[("Accept", "application/x-npy")], b"").body
}

fn gpt_server(dir: &std::path::Path, h: usize, w: usize) -> Server {
    let gpt = if (h, w) == (4, 4) {
        tiny_gpt(dir)
    } else {
        tiny_gpt_grid(dir, h, w)
    };
    Server::start(imgseq_serve::ServeConfig {
        models: vec![ModelSpec {
            name: "g".into(),
            path: gpt,
        }],
        ..config()
    })
}

fn flat(tokens: &serde_json::Value) -> Vec<Vec<i64>> {
    tokens
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            g.as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap().iter().map(|t| t.as_i64().unwrap()))
                .collect()
        })
        .collect()
}

#[test]
fn sample_stream_sends_each_row_then_the_images_of_plain_sample() {
    let dir = tempfile::tempdir().unwrap();
    let s = gpt_server(dir.path(), 4, 4);
    let body = br#"{"class": "b", "n": 2, "seed": 7, "top_k": 5}"#;
    let plain = s.post("/v1/sample", &[], body).json();
    let r = s.post("/v1/sample/stream", &[], body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let lines: Vec<serde_json::Value> = String::from_utf8(r.body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rows: Vec<u64> = lines
        .iter()
        .map(|l| l["rows_done"].as_u64().unwrap())
        .collect();
    assert_eq!(rows, vec![1, 2, 3, 4]);
    let last = lines.last().unwrap();
    assert_eq!(last["done"], true);
    assert_eq!(flat(&last["tokens"]), flat(&plain["tokens"]));
    assert_eq!(last["images_png"], plain["images_png"]);
    for l in &lines[..3] {
        assert!(l.get("done").is_none());
        let part = flat(&l["tokens"]);
        let k = l["rows_done"].as_u64().unwrap() as usize * 4;
        for (p, full) in part.iter().zip(flat(&plain["tokens"])) {
            assert_eq!(p.len(), k);
            assert_eq!(&full[..k], &p[..]);
        }
        let pngs = l["images_png"].as_array().unwrap();
        assert_eq!(pngs.len(), 2);
    }
    // Errors before the first row are plain answers.
    let e = s
        .post("/v1/sample/stream", &[], br#"{"class": "zebra"}"#)
        .error(400);
    assert!(e.contains("zebra"), "{e}");
}

#[test]
fn sample_stream_stops_sampling_when_the_client_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let s = gpt_server(dir.path(), 48, 48);
    let body = br#"{"class": 0, "n": 4, "seed": 1}"#;
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST /v1/sample/stream HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    // Read until the first row's line has arrived, then hang up.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(2).any(|w| w == b"}\n") {
        let k = c.read(&mut buf).unwrap();
        assert!(k > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..k]);
    }
    assert!(String::from_utf8_lossy(&got).contains("\"rows_done\":1"));
    drop(c);
    let t0 = Instant::now();
    loop {
        let m = String::from_utf8(s.get("/metrics").body).unwrap();
        if m.contains("imgseq_streams_stopped_total{reason=\"client_gone\"} 1") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the sampling did not stop:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The worker is free again: a plain sample is answered.
    let r = s.post("/v1/sample", &[], br#"{"class": 0, "n": 1}"#);
    assert_eq!(r.status, 200);
}

#[test]
fn sample_stream_ends_at_the_request_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let gpt = tiny_gpt_grid(dir.path(), 64, 64);
    let s = Server::start(imgseq_serve::ServeConfig {
        models: vec![ModelSpec {
            name: "g".into(),
            path: gpt,
        }],
        deadline: Duration::from_millis(400),
        ..config()
    });
    let t0 = Instant::now();
    let r = s.post("/v1/sample/stream", &[], br#"{"class": 0, "n": 2}"#);
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    if r.status == 200 {
        // The first rows came in time: the stream ends with the deadline's error line.
        let text = String::from_utf8(r.body).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        let e = last["error"].as_str().unwrap_or_else(|| panic!("{last}"));
        assert!(e.contains("deadline"), "{e}");
        let m = String::from_utf8(s.get("/metrics").body).unwrap();
        assert!(
            m.contains("imgseq_streams_stopped_total{reason=\"deadline\"} 1"),
            "{m}"
        );
    } else {
        assert!(r.error(504).contains("deadline"));
    }
}
