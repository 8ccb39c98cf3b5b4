//! [`QueueStats`]: how many messages are in each state.

/// Number of messages in each state of a queue.
///
/// `ready` and `retry` count list entries, which may include entries of
/// cancelled messages until a consumer pops and skips them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Waiting for their due time.
    pub pending: u64,
    /// Due, waiting for a consumer.
    pub ready: u64,
    /// Delivered to a handler, not yet acked or nacked.
    pub processing: u64,
    /// Failed or timed out, waiting to be delivered again.
    pub retry: u64,
    /// Out of deliveries, waiting to be collected.
    pub garbage: u64,
}

impl QueueStats {
    /// Messages not yet finished: everything but garbage.
    pub fn live(&self) -> u64 {
        self.pending + self.ready + self.processing + self.retry
    }
}
