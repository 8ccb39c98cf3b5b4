//! Generated ids: a grouped message's in its group's shard, since a group
//! lives in one shard and every call that takes an id finds the shard
//! from it.

use crate::queue::shard_of;
use crate::MessageId;

/// The shard of `shards` a message of `group` must be in, if any.
pub(super) fn group_shard(group: Option<&str>, shards: usize) -> Option<usize> {
    group.filter(|_| shards > 1).map(|g| shard_of(g, shards))
}

/// An id generated for a message of `group` on a queue of `shards` shards.
pub(super) fn generate_for(group: Option<&str>, shards: usize) -> MessageId {
    generate_in(group_shard(group, shards), shards)
}

/// A generated id, of shard `shard` of `shards` when given: ids hash
/// evenly, so this takes `shards` tries on average.
fn generate_in(shard: Option<usize>, shards: usize) -> MessageId {
    loop {
        let id = MessageId::generate();
        if shard.is_none_or(|s| s == shard_of(id.as_str(), shards)) {
            return id;
        }
    }
}
