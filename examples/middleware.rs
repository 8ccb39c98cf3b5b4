//! Handler middleware with tower: a timing-and-logging layer of our own,
//! stacked with tower's concurrency limit and timeout around a plain
//! async-closure handler (docs/handlers.md).
//!
//! Sends a few messages, consumes them through the stack, prints one line
//! per delivery from the layer, and stops once the queue is empty.
//!
//! ```sh
//! cargo run --example middleware -- redis://127.0.0.1:6379
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use delayqueue::{Counts, DelayQueue, HandlerError, HandlerService, Message};
use tower::{Layer, Service, ServiceBuilder};

/// Logs each delivery with its outcome and how long the inner stack took.
#[derive(Clone)]
struct Timing;

impl<S> Layer<S> for Timing {
    type Service = Timed<S>;
    fn layer(&self, inner: S) -> Timed<S> {
        Timed(inner)
    }
}

#[derive(Clone)]
struct Timed<S>(S);

impl<S> Service<Message> for Timed<S>
where
    S: Service<Message, Response = (), Error = HandlerError>,
    S::Future: Send + 'static,
{
    type Response = ();
    type Error = HandlerError;
    type Future = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, msg: Message) -> Self::Future {
        let (id, attempt, started) = (msg.id().clone(), msg.attempt(), Instant::now());
        let inner = self.0.call(msg);
        Box::pin(async move {
            let result = inner.await;
            let verdict = match &result {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("failed: {e}"),
            };
            println!("{id} attempt {attempt}: {verdict} in {:?}", started.elapsed());
            result
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let client = delayqueue::connect(&url).await?;
    let queue = DelayQueue::builder("middleware-example", client)
        .concurrency(8)
        .nack_redelivery_delay(Duration::from_millis(200))
        .build()?;
    for n in 0..5 {
        queue.send(format!("job {n}")).await?;
    }

    let handler = HandlerService::new(|msg: Message| async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if msg.payload() == b"job 3" && msg.attempt() == 1 {
            return Err::<(), HandlerError>("job 3 fails once".into());
        }
        Ok(())
    });
    // Outermost first: every delivery is timed, at most 2 run at once, each within 1 s.
    let stack = ServiceBuilder::new()
        .layer(Timing)
        .concurrency_limit(2)
        .timeout(Duration::from_secs(1))
        .service(handler);
    let consumer = queue.start_consume(delayqueue::service(stack)).await?;

    let deadline = Instant::now() + Duration::from_secs(30);
    while queue.counts().await? != Counts::default() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    consumer.shutdown().await?;
    Ok(())
}
