//! Looking at messages without touching them: [`MessageInfo`], one page of
//! a state ([`DelayQueue::list`]) or one message by id ([`DelayQueue::get`]).

use crate::info::{MAX_PAGE, PREVIEW_BYTES};
use crate::store::ops::{get::Get, list::List};
use crate::store::Keys;
use crate::{DelayQueue, Error, MessageId, MessageInfo, MessageState, Page};

/// Fails for a state that list, browse and search do not page through:
/// [`MessageState::Waiting`], whose parents `get` and `counts` report.
pub(crate) fn listable(state: MessageState) -> Result<(), Error> {
    match state {
        MessageState::Waiting => Err(Error::InvalidArgument(
            "waiting parents are not listed: read one with get, count them with counts".into(),
        )),
        _ => Ok(()),
    }
}

pub(crate) async fn list(queue: &DelayQueue, state: MessageState, offset: usize, limit: usize) -> Result<Page, Error> {
    listable(state)?;
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::InvalidArgument(format!("limit must be 1 to {MAX_PAGE}")));
    }
    let shards = &queue.inner.shards;
    if let [k] = &shards[..] {
        return list_shard(queue, k, state, offset, limit).await;
    }
    // Shard after shard: positions offset.. of the shards laid end to end.
    let sizes = queue
        .each_shard(|k| async move { Ok::<_, Error>(queue.shard_status(k).await?.counts.of(state)) })
        .await?;
    let mut page = Page {
        total: sizes.iter().sum(),
        ..Page::default()
    };
    let mut start = 0;
    for (k, size) in shards.iter().zip(sizes) {
        let size = position(size);
        if offset >= start + size {
            start += size;
            continue;
        }
        let left = limit - page.items.len();
        if left == 0 {
            page.next = Some(offset.max(start));
            break;
        }
        let part = list_shard(queue, k, state, offset.saturating_sub(start), left).await?;
        page.items.extend(part.items);
        if let Some(next) = part.next {
            page.next = Some(start + next);
            break;
        }
        start += position(part.total);
    }
    Ok(page)
}

/// A count of entries as a position in a page walk (saturating on a
/// 32-bit target, where no page walk gets that far).
fn position(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// One page of one shard.
async fn list_shard(
    queue: &DelayQueue,
    k: &Keys,
    state: MessageState,
    offset: usize,
    limit: usize,
) -> Result<Page, Error> {
    let list = List {
        state,
        offset,
        limit,
        preview: PREVIEW_BYTES,
    };
    queue.store(k).run(&list).await
}

pub(crate) async fn get(queue: &DelayQueue, id: &str) -> Result<Option<MessageInfo>, Error> {
    MessageId::check(id)?;
    let k = queue.shard_of(id);
    Ok(queue.store(k).run(&Get { id }).await?.map(|(info, _)| info))
}

impl DelayQueue {
    /// One page of the messages in `state`: at most `limit` (1 to 1000)
    /// from position `offset`, with a payload preview. Pass
    /// [`Page::next`] as the next offset. One script call, O(log n +
    /// limit) (lists: O(offset + limit)), so safe on a big queue. A sharded
    /// queue lists shard after shard, each in the state's order, and counts
    /// each shard's state first (one more O(1) call per shard).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::MessageState;
    /// let mut offset = Some(0);
    /// while let Some(at) = offset {
    ///     let page = queue.list(MessageState::Dead, at, 100).await?;
    ///     for m in &page.items {
    ///         println!("{} died after {} attempts: {:?}", m.id, m.attempts, m.last_error);
    ///     }
    ///     offset = page.next;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, state: MessageState, offset: usize, limit: usize) -> Result<Page, Error> {
        list(self, state, offset, limit).await
    }

    /// One message by id, with its whole payload; `None` when the queue
    /// does not hold it (unknown, acked, cancelled or deleted). O(log n),
    /// or O(length of the ready and retry lists) when it waits in one.
    pub async fn get(&self, id: impl AsRef<str>) -> Result<Option<MessageInfo>, Error> {
        get(self, id.as_ref()).await
    }
}
