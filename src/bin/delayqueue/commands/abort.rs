//! `abort`: a message waiting is cancelled, one being processed has its
//! handler told and ends as aborted (docs/handlers.md, "Aborting a running
//! handler").

use delayqueue::{AbortOutcome, MessageId};
use serde_json::json;

use super::Ctx;
use crate::failure::Failure;

impl Ctx {
    pub(super) async fn abort(&self, name: &str, id: MessageId) -> Result<u8, Failure> {
        let queue = self.existing(name).await?;
        let outcome = queue.abort(&id).await?;
        let told = match outcome {
            AbortOutcome::Cancelled => "cancelled (it was waiting)",
            AbortOutcome::Aborting => "aborting: its handler is told; it ends as aborted",
            AbortOutcome::AlreadyAborted => {
                return Err(Failure::not_found(format!(
                    "message {:?} of queue {name:?} was aborted already and has not ended yet",
                    id.as_str()
                )))
            }
            _ => {
                return Err(Failure::not_found(format!(
                    "message {:?} not aborted: queue {name:?} has no such message (unknown or finished)",
                    id.as_str()
                )))
            }
        };
        let json = json!({"queue": name, "id": id.as_str(), "outcome": outcome.as_str()});
        self.print(json, || format!("{id}: {told}\n"))?;
        Ok(0)
    }
}
