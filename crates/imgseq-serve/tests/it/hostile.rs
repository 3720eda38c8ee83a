//! Hostile requests get a 4xx one-line JSON error and the server keeps serving.

use crate::common::{config, parse, png, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A PNG whose header declares `w`×`h` pixels (with a tiny IDAT and IEND).
fn png_declaring(w: u32, h: u32) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], data: &[u8]| {
        out.extend((data.len() as u32).to_be_bytes());
        let mut c = kind.to_vec();
        c.extend(data);
        out.extend(&c);
        out.extend(crc32(&c).to_be_bytes());
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]);
    chunk(b"IEND", &[]);
    out
}

/// A real JPEG whose frame header (SOF0) is patched to declare `w`×`h` pixels.
fn jpeg_declaring(w: u16, h: u16) -> Vec<u8> {
    let img = image::RgbImage::from_pixel(16, 16, image::Rgb([90, 120, 200]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
    let mut v = out.into_inner();
    let sof = v
        .windows(2)
        .position(|m| m == [0xFF, 0xC0])
        .expect("a baseline JPEG");
    v[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
    v[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
    v
}

#[test]
fn bad_image_bodies_are_400_or_413_and_the_server_stays_healthy() {
    let s = Server::start(config());
    let good = png(40, 40);
    let e = s.post("/v1/tokenize", &[], b"").error(400);
    assert!(e.contains("empty"), "{e}");
    let e = s
        .post("/v1/tokenize", &[], &good[..good.len() / 2])
        .error(400);
    assert!(e.starts_with("request body:"), "{e}");
    let e = s
        .post("/v1/roundtrip", &[], b"hello, this is not an image")
        .error(400);
    assert!(e.contains("not an image"), "{e}");
    for (body, what) in [
        (png_declaring(60_000, 60_000), "png"),
        (jpeg_declaring(60_000, 60_000), "jpeg"),
    ] {
        let t0 = Instant::now();
        let e = s.post("/v1/tokenize", &[], &body).error(413);
        assert!(e.contains("60000x60000"), "{what}: {e}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{what}: decoded before refusing?"
        );
    }
    // Smaller than the model's input without upscale: the library's one-line message.
    let e = s.post("/v1/embed?model=vq", &[], &png(8, 8)).error(400);
    assert!(e.contains("vit"), "{e}");
    let e = s.post("/v1/tokenize", &[], &png(8, 8)).error(400);
    assert!(e.contains("upscal"), "{e}");
    assert_eq!(
        s.post("/v1/tokenize?upscale=true", &[], &png(8, 8)).status,
        200
    );
    // An up-scaled 16384×1 sliver: only its crop is resized (the whole would be 524288×32).
    assert_eq!(
        s.post("/v1/tokenize?upscale=true", &[], &png(16384, 1))
            .status,
        200
    );
    let e = s.post("/v1/tokenize?colour=red", &[], &good).error(400);
    assert!(e.contains("colour"), "{e}");
    let e = s.post("/v1/tokenize?model=nope", &[], &good).error(404);
    assert!(e.contains("nope"), "{e}");
    assert_eq!(s.get("/healthz").status, 200);
    assert_eq!(s.post("/v1/tokenize", &[], &good).status, 200);
}

#[test]
fn oversized_bodies_are_413_with_or_without_a_length() {
    let s = Server::start(config());
    let big = vec![0u8; (1 << 20) + 1];
    let e = s.post("/v1/tokenize", &[], &big).error(413);
    assert!(e.contains("larger than the limit"), "{e}");
    // Chunked, no length told: counted while read.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = "POST /v1/tokenize HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    c.write_all(head.as_bytes()).unwrap();
    for _ in 0..20 {
        let chunk = vec![b'x'; 64 << 10];
        if c.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .is_err()
            || c.write_all(&chunk).is_err()
            || c.write_all(b"\r\n").is_err()
        {
            break;
        }
    }
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let r = parse(&raw);
    r.error(413);
    assert_eq!(s.get("/healthz").status, 200);
}

#[test]
fn bad_tokens_and_shapes_are_400() {
    let s = Server::start(config());
    let post = |b: &str| {
        s.post(
            "/v1/detokenize",
            &[("Content-Type", "application/json")],
            b.as_bytes(),
        )
    };
    let e = post(r#"{"tokens": [[0, 1], [2, 32]]}"#).error(400);
    assert!(e.contains("32"), "{e}");
    let e = post(r#"{"tokens": [[0, -1]]}"#).error(400);
    assert!(e.contains("-1"), "{e}");
    let e = post(r#"{"tokens": [[0, 1], [2]]}"#).error(400);
    assert!(e.contains("row 1"), "{e}");
    post(r#"{"tokens": []}"#).error(400);
    post(r#"{"tokens": [[0.5]]}"#).error(400);
    post(r#"{"tokens": "abc"}"#).error(400);
    post(r#"{"tokens": [[1]], "more": 1}"#).error(400);
    post("not json").error(400);
    let e = post(&format!("{{\"tokens\": [{}]}}", vec!["[0]"; 500].join(","))).error(413);
    assert!(e.contains("500x1"), "{e}");
    let mut npy = imgseq_core::npy::npy_header("<i8", &[1, 2, 2]);
    npy.extend([0u8; 32]);
    let e = s
        .post(
            "/v1/detokenize",
            &[("Content-Type", "application/x-npy")],
            &npy,
        )
        .error(400);
    assert!(e.contains("shape"), "{e}");
    s.post(
        "/v1/detokenize",
        &[("Content-Type", "application/x-npy")],
        b"\x93NUMPY junk",
    )
    .error(400);
    // A ViT cannot detokenize; a VQ cannot classify.
    s.post("/v1/detokenize?model=vit", &[], br#"{"tokens": [[0]]}"#)
        .error(400);
    s.post("/v1/classify?model=vq", &[], &png(32, 32))
        .error(400);
    s.post("/v1/classify?k=0", &[], &png(32, 32)).error(400);
    assert_eq!(s.get("/v1/tokenize").status, 405);
    s.get("/v1/nothing-here").error(404);
    assert_eq!(s.get("/healthz").status, 200);
}

#[test]
fn a_client_that_never_finishes_its_body_gets_408() {
    let s = Server::start(config());
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = "POST /v1/tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n";
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(&png(40, 40)[..50]).unwrap();
    let t0 = Instant::now();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if raw.windows(4).any(|w| w == b"\r\n\r\n") && raw.ends_with(b"\n") {
            break;
        }
    }
    let e = parse(&raw).error(408);
    assert!(e.contains("not received"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(s.get("/healthz").status, 200);
}

#[test]
fn connections_over_the_limit_get_429_and_later_ones_are_served() {
    let cfg = imgseq_serve::ServeConfig {
        max_connections: 3,
        ..config()
    };
    let s = Server::start(cfg);
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(s.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = s.get("/healthz");
    let e = r.error(429);
    assert!(e.contains("too many connections"), "{e}");
    assert_eq!(r.header("retry-after"), Some("1"));
    drop(idle);
    let t0 = Instant::now();
    while s.get_status("/healthz") != 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "not serving after the idle connections left"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // At least the one refusal above; the polling may add more while the idle connections close.
    let m = String::from_utf8(s.get("/metrics").body).unwrap();
    let refused: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("imgseq_refused_connections_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(refused >= 1, "{m}");
}

#[test]
fn a_full_queue_is_503_with_retry_after() {
    let cfg = imgseq_serve::ServeConfig {
        queue_capacity: 1,
        max_batch: 1,
        ..config()
    };
    let s = Server::start(cfg);
    let addr = s.addr;
    let hold =
        move || crate::common::request(addr, "POST", "/v1/_test?action=sleep&ms=1500", &[], b"");
    let a = std::thread::spawn(hold);
    std::thread::sleep(Duration::from_millis(400)); // taken by the worker
    let b = std::thread::spawn(hold);
    std::thread::sleep(Duration::from_millis(400)); // waiting: the queue is full
    let r = s.post("/v1/tokenize", &[], &png(40, 40));
    let e = r.error(503);
    assert!(e.contains("full"), "{e}");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(a.join().unwrap().status, 200);
    assert_eq!(b.join().unwrap().status, 200);
    assert_eq!(s.post("/v1/tokenize", &[], &png(40, 40)).status, 200);
}

#[test]
fn a_panic_is_500_for_its_request_only() {
    let cfg = imgseq_serve::ServeConfig {
        batch_wait: Duration::from_millis(200),
        ..config()
    };
    let s = Server::start(cfg);
    let (p, ok) = std::thread::scope(|sc| {
        let p = sc.spawn(|| s.post("/v1/_test?action=panic", &[], b""));
        let ok = sc.spawn(|| s.post("/v1/tokenize", &[], &png(40, 40)));
        (p.join().unwrap(), ok.join().unwrap())
    });
    let e = p.error(500);
    assert!(e.contains("panicked"), "{e}");
    assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));
    assert_eq!(s.post("/v1/tokenize", &[], &png(40, 40)).status, 200);
    assert_eq!(s.get("/healthz").status, 200);
}

#[test]
fn a_request_past_its_deadline_is_504() {
    let cfg = imgseq_serve::ServeConfig {
        deadline: Duration::from_secs(1),
        ..config()
    };
    let s = Server::start(cfg);
    let t0 = Instant::now();
    let e = s
        .post("/v1/_test?action=sleep&ms=3000", &[], b"")
        .error(504);
    assert!(e.contains("deadline"), "{e}");
    assert!(t0.elapsed() < Duration::from_millis(2500));
    assert_eq!(s.get("/healthz").status, 200);
}

/// A client that sends its request and half-closes (`nc -N`, some proxies) used to get no
/// answer though the work ran: it is answered.
#[test]
fn a_client_that_half_closes_after_its_request_is_answered() {
    let s = Server::start(config());
    let body = png(40, 40);
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /v1/tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(&body).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    let r = parse(&raw);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["tokens"].is_array());
}

/// Clients that pipeline requests for large answers and never read them held every
/// connection slot (only header reading was timed; `/healthz` got 429 for as long as they
/// stayed): an answer the client reads none of for `write_timeout` closes its connection.
#[test]
fn clients_that_never_read_their_answers_lose_their_slots_after_the_write_timeout() {
    let cfg = imgseq_serve::ServeConfig {
        max_connections: 4,
        write_timeout: Duration::from_secs(1),
        ..config()
    };
    let s = Server::start(cfg);
    // 300 pipelined requests of the 46 kB OpenAPI description: 14 MB of answers, more than
    // the socket buffers hold, on each of the four slots.
    let req = "GET /v1/openapi.json HTTP/1.1\r\nHost: t\r\n\r\n".repeat(300);
    let hogs: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut c = TcpStream::connect(s.addr).unwrap();
            c.write_all(req.as_bytes()).unwrap();
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    while s.get_status("/healthz") != 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "connections that never read still hold every slot"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(hogs);
}
