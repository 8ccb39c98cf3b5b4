//! [`Backoff`]: how long a message waits before its next delivery after a
//! failed one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{Error, MAX_DELAY};

/// How long a message waits after a failed delivery before it is delivered
/// again, by the number of the attempt that failed (1 for the first
/// delivery).
///
/// Set one per queue with
/// [`DelayQueueBuilder::backoff`](crate::DelayQueueBuilder::backoff) and
/// override it per message with
/// [`NewMessage::backoff`](crate::NewMessage::backoff). A handler can
/// also ask for a specific delay for one failure with
/// [`RetryAfter`](crate::RetryAfter). The default is
/// `Backoff::exponential(1 s, 10 min)` with a jitter of 0.25: 1 s, 2 s, 4 s
/// ... each up to a quarter shorter, so a burst of failures does not come
/// back as a burst.
///
/// ```
/// use std::time::Duration;
/// use delayqueue::Backoff;
///
/// let b = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60)).jitter(0.0);
/// assert_eq!(b.delay(1), Duration::from_secs(1));
/// assert_eq!(b.delay(3), Duration::from_secs(4));
/// assert_eq!(b.delay(30), Duration::from_secs(60));
///
/// assert_eq!(Backoff::fixed(Duration::from_secs(5)).delay(7), Duration::from_secs(5));
///
/// // Anything else: a function of the failed attempt (queue-wide only).
/// let b = Backoff::custom(|attempt| Duration::from_secs(10 * u64::from(attempt)));
/// assert_eq!(b.delay(2), Duration::from_secs(20));
/// ```
#[derive(Clone)]
pub struct Backoff(Kind);

type DelayFn = dyn Fn(u32) -> Duration + Send + Sync;

#[derive(Clone)]
enum Kind {
    Fixed(Duration),
    Exponential {
        first: Duration,
        max: Duration,
        jitter: f64,
    },
    Custom(Arc<DelayFn>),
}

/// Jitter of [`Backoff::exponential`] unless set.
const DEFAULT_JITTER: f64 = 0.25;

impl Backoff {
    /// The same delay after every failure; zero redelivers at once.
    pub fn fixed(delay: Duration) -> Self {
        Backoff(Kind::Fixed(delay))
    }

    /// `first` after the first failure, doubling after each further one,
    /// never more than `max`; with a jitter of 0.25 unless
    /// [`jitter`](Self::jitter) says otherwise.
    pub fn exponential(first: Duration, max: Duration) -> Self {
        Backoff(Kind::Exponential {
            first,
            max,
            jitter: DEFAULT_JITTER,
        })
    }

    /// Makes each delay of an exponential backoff up to this fraction
    /// shorter, at random (0 to 1; 0 turns jitter off). Other kinds ignore it.
    pub fn jitter(self, fraction: f64) -> Self {
        match self.0 {
            Kind::Exponential { first, max, .. } => Backoff(Kind::Exponential {
                first,
                max,
                jitter: if fraction.is_nan() {
                    0.0
                } else {
                    fraction.clamp(0.0, 1.0)
                },
            }),
            other => Backoff(other),
        }
    }

    /// The delay is `f(attempt)`, where `attempt` is the number of the
    /// delivery that failed. Only for a whole queue: it cannot be stored
    /// with a message.
    pub fn custom(f: impl Fn(u32) -> Duration + Send + Sync + 'static) -> Self {
        Backoff(Kind::Custom(Arc::new(f)))
    }

    /// How long to wait after delivery number `attempt` (1 = the first)
    /// failed, capped at [`MAX_DELAY`].
    pub fn delay(&self, attempt: u32) -> Duration {
        let d = match &self.0 {
            Kind::Fixed(d) => *d,
            Kind::Exponential { first, max, jitter } => {
                let doublings = attempt.saturating_sub(1);
                let base = match doublings {
                    0..=31 => first.saturating_mul(1 << doublings).min(*max),
                    _ => *max,
                };
                base.mul_f64(1.0 - jitter * fastrand::f64())
            }
            Kind::Custom(f) => f(attempt),
        };
        d.min(MAX_DELAY)
    }

    /// Fails when a delay it names is longer than [`MAX_DELAY`].
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let longest = match &self.0 {
            Kind::Fixed(d) => *d,
            Kind::Exponential { first, max, .. } => *first.max(max),
            Kind::Custom(_) => Duration::ZERO,
        };
        if longest > MAX_DELAY {
            return Err(Error::InvalidArgument(format!(
                "backoff delay {longest:?} is longer than MAX_DELAY"
            )));
        }
        Ok(())
    }

    /// The form stored with a message (`f<ms>` or `e<first>,<max>,<jitter
    /// per mille>`); an error for a custom backoff, which has none.
    pub(crate) fn encode(&self) -> Result<String, Error> {
        let ms = |d: &Duration| d.min(&MAX_DELAY).as_millis();
        match &self.0 {
            Kind::Fixed(d) => Ok(format!("f{}", ms(d))),
            Kind::Exponential { first, max, jitter } => Ok(format!(
                "e{},{},{}",
                ms(first),
                ms(max),
                (jitter * 1000.0).round() as u32
            )),
            Kind::Custom(_) => Err(Error::InvalidArgument(
                "a custom backoff can be set on the queue only, not on a message".into(),
            )),
        }
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub(crate) fn decode(s: &str) -> Option<Self> {
        let ms = |s: &str| s.parse::<u64>().ok().map(Duration::from_millis);
        if let Some(d) = s.strip_prefix('f') {
            return ms(d).map(Backoff::fixed);
        }
        let mut parts = s.strip_prefix('e')?.split(',');
        let (first, max, jitter) = (
            ms(parts.next()?)?,
            ms(parts.next()?)?,
            parts.next()?.parse::<u32>().ok()?,
        );
        parts
            .next()
            .is_none()
            .then(|| Backoff::exponential(first, max).jitter(f64::from(jitter) / 1000.0))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::exponential(Duration::from_secs(1), Duration::from_secs(600))
    }
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Fixed(d) => f.debug_tuple("Fixed").field(d).finish(),
            Kind::Exponential { first, max, jitter } => f
                .debug_struct("Exponential")
                .field("first", first)
                .field("max", max)
                .field("jitter", jitter)
                .finish(),
            Kind::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// Two custom backoffs are equal only when they are clones of one.
impl PartialEq for Backoff {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Kind::Fixed(a), Kind::Fixed(b)) => a == b,
            (
                Kind::Exponential { first, max, jitter },
                Kind::Exponential {
                    first: f2,
                    max: m2,
                    jitter: j2,
                },
            ) => first == f2 && max == m2 && jitter.to_bits() == j2.to_bits(),
            (Kind::Custom(a), Kind::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Backoff {}

/// For people: `fixed 5s`, `exponential 1s to 10m, jitter 25%`, `custom`.
///
/// ```
/// use std::time::Duration;
/// let b = delayqueue::Backoff::exponential(Duration::from_secs(1), Duration::from_secs(600));
/// assert_eq!(b.to_string(), "exponential 1s to 600s, jitter 25%");
/// ```
impl fmt::Display for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Fixed(d) => write!(f, "fixed {d:?}"),
            Kind::Exponential { first, max, jitter } => {
                write!(
                    f,
                    "exponential {first:?} to {max:?}, jitter {}%",
                    (jitter * 100.0).round()
                )
            }
            Kind::Custom(_) => f.write_str("custom"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_doubles_to_its_cap_and_jitter_only_shortens() {
        let s = Duration::from_secs;
        let b = Backoff::exponential(s(1), s(600));
        for attempt in 1..=100 {
            let base = if attempt > 10 { s(600) } else { s(1 << (attempt - 1)) };
            let d = b.delay(attempt);
            assert!(
                d <= base && d >= base.mul_f64(0.75),
                "attempt {attempt}: {d:?} for {base:?}"
            );
        }
        let b = b.jitter(0.0);
        assert_eq!(b.delay(0), s(1));
        assert_eq!(b.delay(u32::MAX), s(600));
        assert_eq!(
            Backoff::exponential(s(1), MAX_DELAY * 2).jitter(0.0).delay(u32::MAX),
            MAX_DELAY
        );
    }

    #[test]
    fn stored_forms_round_trip() {
        let s = Duration::from_millis;
        for b in [
            Backoff::fixed(s(0)),
            Backoff::fixed(s(2500)),
            Backoff::exponential(s(10), s(90_000)).jitter(0.5),
            Backoff::default(),
        ] {
            let text = b.encode().unwrap();
            let back = Backoff::decode(&text).unwrap();
            assert_eq!(format!("{back:?}"), format!("{b:?}"), "{text}");
        }
        assert!(Backoff::custom(|_| Duration::ZERO).encode().is_err());
        for bad in ["", "x1", "f", "f-1", "e1,2", "e1,2,3,4", "e1,x,3"] {
            assert!(Backoff::decode(bad).is_none(), "{bad}");
        }
    }
}
