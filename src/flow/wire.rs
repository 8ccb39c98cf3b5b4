//! The flow protocol's values as the scripts keep them (docs/workflows.md):
//! a child (`"<base> <id>"`), a child's link to a parent
//! (`"<policy> <base> <id>"`) and a completion's outcome and policy
//! (`"af"`). Each wire string is built and read here only.

use super::ChildPolicy;

/// A child as a parent's set and children hash name it: the base of its
/// shard's keys and its id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ChildRef {
    pub base: String,
    pub id: String,
}

impl ChildRef {
    /// Child `id` of the shard with keys base `base`.
    pub(crate) fn new(base: impl Into<String>, id: impl Into<String>) -> Self {
        ChildRef {
            base: base.into(),
            id: id.into(),
        }
    }

    /// The member that keeps a cohort's callback waiting until the cohort
    /// is closed: the callback's own base and an empty id, no message.
    pub(crate) fn cohort_open(base: impl Into<String>) -> Self {
        ChildRef::new(base, "")
    }

    /// Whether it is a cohort's open member, which no link names.
    pub(crate) fn is_cohort_open(&self) -> bool {
        self.id.is_empty()
    }

    /// `"<base> <id>"`.
    pub(crate) fn member(&self) -> String {
        format!("{} {}", self.base, self.id)
    }

    /// The base and id of a member; `None` for a children hash's counts
    /// (`" a"`) and a cohort's open member (an empty id).
    pub(crate) fn parse(member: &[u8]) -> Option<(&str, &str)> {
        let member = std::str::from_utf8(member).ok()?;
        member
            .split_once(' ')
            .filter(|(base, id)| !base.is_empty() && !id.is_empty())
    }
}

/// A child's link to one of its parents (the `parents` hash): the policy
/// the parent waits with, the base of its shard's keys and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParentLink {
    pub policy: ChildPolicy,
    pub base: String,
    pub id: String,
}

impl ParentLink {
    /// `"<policy> <base> <id>"`.
    pub(crate) fn wire(&self) -> String {
        format!("{} {} {}", self.policy.letter(), self.base, self.id)
    }

    /// One link of a `parents` hash value.
    pub(crate) fn parse(link: &str) -> Option<Self> {
        let mut parts = link.splitn(3, ' ');
        let policy = ChildPolicy::of_letter(parts.next()?)?;
        let base = parts.next()?.to_string();
        let id = parts.next().filter(|id| !id.is_empty())?.to_string();
        Some(ParentLink { policy, base, id })
    }
}

/// How a child finished, as a completion carries it to its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Acked, or no longer stored when linked.
    Acked,
    /// A dead letter.
    Dead,
    /// Cancelled or deleted.
    Cancelled,
    /// A cohort's close: its open member leaves the callback's set.
    Closed,
}

impl Outcome {
    const ALL: [Outcome; 4] = [Outcome::Acked, Outcome::Dead, Outcome::Cancelled, Outcome::Closed];

    /// The letter the scripts keep it as.
    pub(crate) fn letter(self) -> char {
        match self {
            Outcome::Acked => 'a',
            Outcome::Dead => 'd',
            Outcome::Cancelled => 'c',
            Outcome::Closed => 'o',
        }
    }

    /// The outcome a script's letter stands for.
    pub(crate) fn of_letter(letter: &str) -> Option<Self> {
        Outcome::ALL
            .into_iter()
            .find(|o| letter.len() == 1 && letter.starts_with(o.letter()))
    }

    /// What flow_complete.lua takes: the outcome's letter, then the policy's.
    pub(crate) fn with(self, policy: ChildPolicy) -> String {
        format!("{}{}", self.letter(), policy.letter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_children_are_read_from_their_wire_form() {
        let link = ParentLink {
            policy: ChildPolicy::Wait,
            base: "dq:{orders}:".into(),
            id: "close-42".into(),
        };
        assert_eq!(ParentLink::parse("w dq:{orders}: close-42"), Some(link.clone()));
        assert_eq!(ParentLink::parse(&link.wire()), Some(link));
        assert_eq!(ParentLink::parse("x dq:{orders}: a"), None);
        assert_eq!(ParentLink::parse("f dq:{orders}: "), None);
        assert_eq!(ChildRef::parse(b" a"), None);
        assert_eq!(ChildRef::parse(b"dq:{b}: "), None);
        let child = ChildRef::new("dq:{mail}:", "m-1");
        assert_eq!(ChildRef::parse(child.member().as_bytes()), Some(("dq:{mail}:", "m-1")));
        assert_eq!(ChildRef::cohort_open("dq:{b}:").member(), "dq:{b}: ");
        for o in Outcome::ALL {
            assert_eq!(Outcome::of_letter(&o.letter().to_string()), Some(o));
        }
        assert_eq!(Outcome::Dead.with(ChildPolicy::Remove), "dr");
    }
}
