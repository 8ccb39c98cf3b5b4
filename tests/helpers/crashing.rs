//! A consumer that crashes holding a message: it runs on a runtime of its
//! own, in a thread, with a handler that never returns; [`Crashing::crash`]
//! drops that runtime with its tasks, as a killed process would: no nack,
//! no more lease renewals.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use delayqueue::{HandlerError, Message};
use delayqueue_test_support::WAIT;

use super::queue_builder;

/// The crashing consumer's thread and how to crash it.
pub struct Crashing {
    started: Option<mpsc::Receiver<()>>,
    crash: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Crashing {
    /// Starts a consumer of queue `name` on `url` whose leases last `lease`
    /// (renewed while it lives) and whose handler hangs until the crash.
    pub fn start(url: String, name: &str, fetch_interval: Duration, lease: Duration) -> Crashing {
        let name = name.to_owned();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let client = delayqueue::connect(&url).await.unwrap();
                let q = queue_builder(&name, &client, fetch_interval)
                    .max_consume_duration(lease)
                    .handler_timeout(Duration::from_secs(600))
                    .build()
                    .unwrap();
                let consumer = q
                    .start_consume(move |_msg: Message| {
                        let started = started_tx.clone();
                        async move {
                            let _ = started.send(());
                            std::future::pending::<()>().await;
                            Ok::<(), HandlerError>(())
                        }
                    })
                    .await
                    .unwrap();
                // Never shut down: the runtime goes away under it.
                std::mem::forget(consumer);
                let _ = crash_rx.await;
            });
            rt.shutdown_background();
        });
        Crashing {
            started: Some(started_rx),
            crash: Some(crash_tx),
            thread: Some(thread),
        }
    }

    /// Waits (up to [`WAIT`]) until the handler holds a message.
    pub async fn wait_started(&mut self) {
        let started = self.started.take().expect("waited for twice");
        tokio::task::spawn_blocking(move || started.recv_timeout(WAIT))
            .await
            .unwrap()
            .expect("the crashing consumer never started its handler");
    }

    /// Drops the consumer's runtime with its tasks and waits for its thread.
    pub fn crash(&mut self) {
        if let Some(crash) = self.crash.take() {
            let _ = crash.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

impl Drop for Crashing {
    fn drop(&mut self) {
        self.crash();
    }
}
