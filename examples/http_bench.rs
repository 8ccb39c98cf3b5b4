//! Sends per second through the producer API (`POST /api/v1/...`) over a
//! real loopback socket, next to direct `queue.send` in the same run, at
//! the same concurrency. Run against a throwaway Redis (it writes queue
//! `http-bench` under prefix `dq:` and purges it):
//!
//! ```sh
//! redis-server --port 6399 --save '' --appendonly no --daemonize yes
//! cargo run --release --features web --example http_bench
//! redis-cli -p 6399 shutdown nosave
//! ```
//!
//! The HTTP client (hyper, keep-alive connections) and the server run in
//! this process, on the same runtime: the figure includes the client's
//! work, as a producer on the same host would pay it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use delayqueue::web::{Auth, Dashboard};
use delayqueue::DelayQueue;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const MESSAGES: usize = 20_000;
const CONCURRENCY: usize = 64;
const BATCH: usize = 100;
const TOKEN: &str = "bench-token";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6399".into());
    let client = delayqueue::connect(&url).await?;
    let queue = DelayQueue::builder("http-bench", client.clone()).build()?;
    queue.purge().await?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Dashboard::new(client.clone())
        .auth(Auth::Bearer(TOKEN.into()))
        .router()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http: Client<_, Body> = Client::builder(TokioExecutor::new()).build_http();

    let q = queue.clone();
    let direct = rate(MESSAGES, move |_| {
        let queue = q.clone();
        async move {
            queue
                .send("payload")
                .delay(Duration::from_secs(3600))
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await;
    queue.purge().await?;
    let h = http.clone();
    let one = rate(MESSAGES, move |_| {
        let (http, uri) = (h.clone(), format!("http://{addr}/api/v1/queues/http-bench/messages"));
        async move { post(&http, &uri, r#"{"payload":"payload","delay_ms":3600000}"#.to_string()).await }
    })
    .await;
    queue.purge().await?;
    let item = r#"{"payload":"payload","delay_ms":3600000}"#;
    let body = format!(r#"{{"messages":[{}]}}"#, vec![item; BATCH].join(","));
    let batched = rate(MESSAGES / BATCH, move |_| {
        let (http, uri, body) = (
            http.clone(),
            format!("http://{addr}/api/v1/queues/http-bench/batch"),
            body.clone(),
        );
        async move { post(&http, &uri, body).await }
    })
    .await
        * BATCH as f64;
    let stored = queue.counts().await?.pending;
    queue.purge().await?;
    assert_eq!(stored as usize, MESSAGES, "every batched message stored");

    println!("{MESSAGES} sends, {CONCURRENCY} at a time:");
    println!("  direct queue.send          {direct:>9.0} /s");
    println!(
        "  HTTP, one per request      {one:>9.0} /s  ({:.2} of direct)",
        one / direct
    );
    println!(
        "  HTTP, {BATCH} per request     {batched:>9.0} /s  ({:.2} of direct)",
        batched / direct
    );
    Ok(())
}

async fn post(
    http: &Client<hyper_util::client::legacy::connect::HttpConnector, Body>,
    uri: &str,
    body: String,
) -> Result<(), String> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::from(body))
        .map_err(|e| e.to_string())?;
    let res = http.request(req).await.map_err(|e| e.to_string())?;
    let status = res.status();
    let bytes = axum::body::to_bytes(Body::new(res.into_body()), usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    if status == StatusCode::CREATED || status == StatusCode::OK {
        Ok(())
    } else {
        Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)))
    }
}

/// Calls per second of `n` calls of `call`, `CONCURRENCY` at a time; panics on a failed call.
async fn rate<F, Fut>(n: usize, call: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let (call, next) = (Arc::new(call), Arc::new(AtomicUsize::new(0)));
    let t = Instant::now();
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (call, next) = (call.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    if let Err(e) = call(i).await {
                        panic!("call {i} failed: {e}");
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("a worker panicked");
    }
    n as f64 / t.elapsed().as_secs_f64()
}
