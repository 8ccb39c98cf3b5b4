//! Coalesced script calls: callers hand their items (a shard's acks, its
//! handlers' progress and log lines) to one task, which sends whatever has
//! piled up as a single script call.
//!
//! Batching adds no timer: while one call is in flight the next batch
//! gathers, so under load many items share a round trip and when idle each
//! item goes out at once. A batch is bounded in items and in bytes, so no
//! call makes a script read more than its bound.

use std::future::Future;

use tokio::sync::mpsc;

/// What one batching task sends.
pub(crate) trait Batcher: Send + 'static {
    /// One caller's item.
    type Item: Send + 'static;
    /// Most items in one call.
    const MAX_ITEMS: usize;
    /// Most bytes of items ([`size`](Self::size)) in one call: an item
    /// that would pass it waits for the next call, which it starts (so a
    /// bigger one goes alone).
    const MAX_BYTES: usize;

    /// The bytes of `item` that the script reads.
    fn size(item: &Self::Item) -> usize;

    /// Sends `batch` (never empty), answering its callers; it is cleared after.
    fn send(&mut self, batch: &mut Vec<Self::Item>) -> impl Future<Output = ()> + Send;
}

/// Sends the items of `rx` with `b` until every sender is dropped and all
/// items are sent; returns `b`.
///
/// Items come boxed: a channel allocates its first block of slots up
/// front, which an idle queue's task holds all along.
pub(crate) async fn run<B: Batcher>(mut b: B, mut rx: mpsc::UnboundedReceiver<Box<B::Item>>) -> B {
    // Grown on the first item, not before: an idle queue's task holds it.
    let mut batch = Vec::new();
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(item) => item,
            None => match rx.recv().await {
                Some(item) => *item,
                None => return b,
            },
        };
        let mut bytes = B::size(&first);
        batch.push(first);
        while batch.len() < B::MAX_ITEMS {
            let Ok(item) = rx.try_recv() else { break };
            let item = *item;
            bytes += B::size(&item);
            if bytes > B::MAX_BYTES {
                next = Some(item);
                break;
            }
            batch.push(item);
        }
        // Boxed, so that an idle task does not hold the sending's state.
        Box::pin(b.send(&mut batch)).await;
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the sizes of each batch it is given.
    struct Recorder(Vec<Vec<usize>>);

    impl Batcher for Recorder {
        type Item = usize;
        const MAX_ITEMS: usize = 3;
        const MAX_BYTES: usize = 10;

        fn size(item: &usize) -> usize {
            *item
        }

        async fn send(&mut self, batch: &mut Vec<usize>) {
            self.0.push(batch.clone());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_are_cut_by_items_and_bytes_in_order() {
        let (tx, rx) = mpsc::unbounded_channel();
        for size in [1, 1, 1, 1, 4, 6, 20, 1] {
            tx.send(Box::new(size)).unwrap();
        }
        drop(tx);
        let Recorder(batches) = run(Recorder(Vec::new()), rx).await;
        assert_eq!(
            batches,
            vec![vec![1, 1, 1], vec![1, 4], vec![6], vec![20], vec![1]],
            "three items at most, ten bytes at most but a bigger item alone"
        );
    }
}
