//! The testing kit (`delayqueue::testing`, docs/testing.md) as users call
//! it: handlers run on crafted messages without Redis, and a throwaway
//! server with the queue helpers an integration test needs.

use std::time::Duration;

use delayqueue::testing::{self, RedisServer, TestMessage, Verdict};
use delayqueue::{Backoff, DelayQueue, HandlerError, Message, MessageState, RetryAfter, SkipRetry, MAX_LOG_LINE};

const WAIT: Duration = Duration::from_secs(60);

async fn charge(msg: Message) -> Result<Vec<u8>, HandlerError> {
    msg.progress(50).await?;
    msg.log(format!("charging {}", String::from_utf8_lossy(msg.payload())))
        .await?;
    match msg.payload() {
        b"refused" => Err(SkipRetry::new("card refused").into()),
        b"busy" => Err(RetryAfter::new(Duration::from_secs(30), "gateway busy").into()),
        b"later" => Err(RetryAfter::new(Duration::from_secs(5), "not yet").uncounted().into()),
        b"flaky" => Err("gateway error".into()),
        b"bug" => panic!("a bug"),
        b"slow" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Vec::new())
        }
        _ => Ok(b"receipt".to_vec()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_runs_on_a_crafted_message_and_shows_what_it_did() {
    let ok = TestMessage::new("order 7")
        .id("o-7")
        .group("tenant-1")
        .header("k", "v")
        .run(&charge)
        .await
        .unwrap();
    assert_eq!(ok.verdict, Verdict::Acked);
    assert_eq!(ok.progress, [serde_json::json!(50)]);
    assert_eq!(ok.log, ["charging order 7"]);
    assert_eq!(ok.result.as_deref(), Some(&b"receipt"[..]));

    let refused = TestMessage::new("refused").run(&charge).await.unwrap();
    assert_eq!(
        refused.verdict,
        Verdict::Dead {
            reason: "card refused (not retried)".into()
        }
    );
    assert_eq!(refused.result, None);

    let busy = TestMessage::new("busy").run(&charge).await.unwrap();
    assert_eq!(
        busy.verdict,
        Verdict::Retry {
            after: Duration::from_secs(30),
            reason: "gateway busy (retry in 30s)".into()
        }
    );
    let later = TestMessage::new("later").run(&charge).await.unwrap();
    assert_eq!(
        later.verdict,
        Verdict::Deferred {
            after: Duration::from_secs(5)
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_retries_by_the_backoff_until_the_last_delivery_then_dies() {
    let backoff = Backoff::fixed(Duration::from_secs(7));
    let first = TestMessage::new("flaky")
        .retry_count(2)
        .backoff(backoff.clone())
        .run(&charge)
        .await
        .unwrap();
    assert_eq!(
        first.verdict,
        Verdict::Retry {
            after: Duration::from_secs(7),
            reason: "gateway error".into()
        }
    );
    let own = TestMessage::new("flaky")
        .backoff(backoff.clone())
        .own_backoff(Backoff::fixed(Duration::from_secs(2)))
        .run(&charge)
        .await
        .unwrap();
    assert!(matches!(own.verdict, Verdict::Retry { after, .. } if after == Duration::from_secs(2)));
    let last = TestMessage::new("flaky")
        .retry_count(2)
        .attempt(3)
        .run(&charge)
        .await
        .unwrap();
    assert_eq!(
        last.verdict,
        Verdict::Dead {
            reason: "gateway error".into()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_and_a_time_limit_are_failures_and_notes_are_cut_as_the_queue_cuts_them() {
    let bug = TestMessage::new("bug").run(&charge).await.unwrap();
    assert!(
        matches!(&bug.verdict, Verdict::Retry { reason, .. } if reason == "panic: a bug"),
        "{bug:?}"
    );
    let slow = TestMessage::new("slow")
        .time_limit(Duration::from_millis(50))
        .run(&charge)
        .await
        .unwrap();
    assert!(
        matches!(&slow.verdict, Verdict::Retry { reason, .. } if reason.contains("timed out")),
        "{slow:?}"
    );

    let long = "é".repeat(MAX_LOG_LINE);
    let noted = TestMessage::new("x")
        .run(&move |m: Message| {
            let long = long.clone();
            async move {
                m.log(&long).await?;
                m.progress(101).await?;
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    assert!(noted.log[0].len() <= MAX_LOG_LINE && noted.log[0].chars().all(|c| c == 'é'));
    assert!(
        matches!(&noted.verdict, Verdict::Retry { reason, .. } if reason.contains("progress 101")),
        "an out-of-range progress is the handler's error: {noted:?}"
    );
    let unencodable = std::collections::BTreeMap::from([(vec![1u8], 1u8)]);
    let bad = TestMessage::new(delayqueue::Json(unencodable)).run(&charge).await;
    assert!(bad.is_err(), "a payload that does not encode is an error, not a panic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_make_due_and_drain_on_a_throwaway_server() {
    let server = RedisServer::start().await.unwrap();
    let client = server.client().await.unwrap();
    let queue = DelayQueue::builder("orders", client.clone()).build().unwrap();
    queue.send("cancel 1").delay(Duration::from_secs(1800)).await.unwrap();
    queue
        .send("cancel 2")
        .delay(Duration::from_secs(86_400 * 7))
        .await
        .unwrap();
    queue.send("flaky").await.unwrap();

    let held = testing::held(&queue).await.unwrap();
    let pending: Vec<_> = held.iter().filter(|m| m.state == MessageState::Pending).collect();
    assert_eq!(
        pending.len(),
        3,
        "a message sent due now is pending until promoted: {held:?}"
    );
    assert!(pending.iter().any(|m| m.payload == b"cancel 2"));

    let moved = testing::make_due(&queue).await.unwrap();
    assert!(
        (2..=3).contains(&moved),
        "the two delayed ones (and the due one, unless promoted already): {moved}"
    );
    let handler = |m: Message| async move {
        if m.payload() == b"flaky" {
            return Err(RetryAfter::new(Duration::from_secs(3600), "later").into());
        }
        Ok::<(), HandlerError>(())
    };
    let drained = testing::drain(&queue, handler, WAIT).await.unwrap();
    assert_eq!((drained.handled, drained.failed), (3, 1));
    let left = testing::held(&queue).await.unwrap();
    assert_eq!(left.len(), 1, "the acked are gone, the retry waits: {left:?}");
    assert_eq!((left[0].state, left[0].attempts), (MessageState::Pending, 1));

    let port = server.port();
    server.stop();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "a stopped server no longer listens"
    );
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_server_binary_is_an_error_that_says_how_to_fix_it() {
    let e = RedisServer::start_with("/nonexistent/redis-server")
        .await
        .expect_err("no binary, no server");
    let said = e.to_string();
    assert!(
        said.contains("/nonexistent/redis-server") && said.contains("REDIS_SERVER_BIN"),
        "{said}"
    );
}

/// Runs `handler` on a message aborted `after` its start.
async fn aborted_after(after: Duration, handler: &impl delayqueue::Handler) -> testing::Handled {
    TestMessage::new("export")
        .aborted_after(after)
        .run(handler)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_abort_while_the_handler_runs_makes_the_verdict_aborted_whatever_it_returns() {
    // A handler that winds down on the signal, and one that ignores it.
    let winds_down = |msg: Message| async move {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(60)) => Ok::<_, HandlerError>(()),
            () = msg.aborted() => Err("stopped".into()),
        }
    };
    let ran = aborted_after(Duration::from_millis(10), &winds_down).await;
    assert_eq!(ran.verdict, Verdict::Aborted);
    let ignores = |_: Message| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok::<_, HandlerError>(b"done".to_vec())
    };
    let ran = aborted_after(Duration::ZERO, &ignores).await;
    assert_eq!((ran.verdict, ran.result), (Verdict::Aborted, None));
    // Done before the abort came: acked.
    let quick = |_: Message| async move { Ok::<_, HandlerError>(()) };
    assert_eq!(
        aborted_after(Duration::from_secs(60), &quick).await.verdict,
        Verdict::Acked
    );
}
