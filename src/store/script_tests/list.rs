//! list.lua: pages of one state.

use crate::{Error, MessageState};

use super::{Env, Msg, NEVER, RETRY};

#[tokio::test]
async fn list_pages_through_a_state_and_skips_stale_list_entries() {
    let env = Env::new().await;
    let k = env.k().clone();
    let ids: Vec<String> = (0..25).map(|i| format!("p{i:02}")).collect();
    let batch: Vec<Msg> = ids.iter().map(|id| (id.as_str(), "x", 60_000, NEVER, RETRY)).collect();
    env.send_many(&batch).await;
    let mut seen = Vec::new();
    let mut offset = Some(0);
    let mut calls = 0;
    while let Some(at) = offset {
        let page = env.queue.list(MessageState::Pending, at, 10).await.unwrap();
        assert_eq!(page.total, 25);
        seen.extend(page.items.iter().map(|m| m.id.to_string()));
        offset = page.next;
        calls += 1;
    }
    assert_eq!((seen, calls), (ids.clone(), 3));
    let first = &env.queue.list(MessageState::Pending, 0, 1).await.unwrap().items[0];
    assert_eq!(first.payload, b"x");
    assert_eq!((first.attempts, first.retry_count), (0, Some(RETRY as u32)));
    assert!(first.due.unwrap() > std::time::SystemTime::now());

    // Ready: a cancelled message's stale entry is left out, previews are cut.
    let long = "y".repeat(1000);
    env.seed_value("r1", &format!("2:{long}"), Some("1:boom"));
    env.raw(&["RPUSH", &k.ready, "gone", "r1"]);
    env.mark_stale();
    let page = env.queue.list(MessageState::Ready, 0, 10).await.unwrap();
    assert_eq!((page.total, page.items.len(), page.next), (2, 1, None));
    let r1 = &page.items[0];
    assert_eq!((r1.payload.len(), r1.payload_len), (crate::PREVIEW_BYTES, 1000));
    assert_eq!(
        (r1.attempts, r1.last_error.as_deref(), r1.deliveries_left()),
        (1, Some("boom"), Some(2))
    );
    assert!(matches!(
        env.queue.list(MessageState::Ready, 0, 1001).await,
        Err(Error::InvalidArgument(_))
    ));
}
