//! Repeating schedules: [`Schedule`] (what to send and when), [`Misfire`]
//! (what to do with fires missed while no scheduler ran), [`ScheduleInfo`]
//! (a stored schedule, read), and the pure timing rules the scheduler
//! follows (`Timing`, `plan`). Cron expressions are parsed by `croner`,
//! times in a time zone computed with `chrono-tz` (docs/schedules.md).

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, TimeZone as _};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use crate::maxima::{MAX_DELAY, MAX_RETRY_COUNT};
use crate::payload::{IntoPayload, Payload};
use crate::{Backoff, Error};

/// Longest schedule name, in bytes.
pub const MAX_SCHEDULE_NAME_LEN: usize = 100;
/// Most schedules one queue (one shard of a sharded queue) holds.
pub const MAX_SCHEDULES: usize = 1000;
/// Shortest interval of [`Schedule::every`].
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The default [`Schedule::misfire_grace`].
pub const DEFAULT_MISFIRE_GRACE: Duration = Duration::from_secs(60);

/// What a scheduler does with fires whose time passed more than the
/// schedule's [`misfire_grace`](Schedule::misfire_grace) ago without being
/// sent (no scheduler ran, Redis was down). A fire late by less than the
/// grace is sent as it is, late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Misfire {
    /// Drops them: the next fire is the first one within the grace.
    Skip,
    /// Sends the first of them once, due now, and drops the rest.
    #[default]
    FireOnce,
}

impl Misfire {
    /// The word stored in Redis and shown by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::FireOnce => "once",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "skip" => Some(Misfire::Skip),
            "once" => Some(Misfire::FireOnce),
            _ => None,
        }
    }
}

/// A repeating schedule: every fire sends one ordinary message with this
/// payload and these options to the queue. Register it with
/// [`DelayQueue::set_schedule`](crate::DelayQueue::set_schedule).
///
/// ```
/// use std::time::Duration;
/// use delayqueue::{Backoff, Misfire, Schedule};
/// // 09:30 on weekdays in Berlin (5 fields; a sixth, first, gives seconds).
/// let report = Schedule::cron("30 9 * * MON-FRI", "daily report")
///     .timezone("Europe/Berlin")
///     .retry_count(5)
///     .backoff(Backoff::fixed(Duration::from_secs(30)))
///     .misfire(Misfire::Skip);
/// let ping = Schedule::every(Duration::from_secs(10), "ping");
/// # let _ = (report, ping);
/// ```
#[derive(Debug)]
#[must_use = "a schedule does nothing until passed to set_schedule"]
pub struct Schedule {
    pub(crate) spec: String,
    pub(crate) payload: Result<Payload, Error>,
    pub(crate) timezone: String,
    pub(crate) retry_count: Option<u32>,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) group: Option<String>,
    pub(crate) misfire: Misfire,
    pub(crate) grace: Duration,
}

impl Schedule {
    /// Fires at the times of a cron expression: 5 fields (minute hour
    /// day-of-month month day-of-week) or 6 with seconds first, plus
    /// `L`, `W`, `#` and nicknames such as `@daily` (croner's syntax). In
    /// UTC unless [`timezone`](Self::timezone) says otherwise.
    pub fn cron(expression: &str, payload: impl IntoPayload) -> Self {
        Self::new(format!("cron {}", expression.trim()), payload)
    }

    /// Fires every `interval` (at least [`MIN_INTERVAL`], whole
    /// milliseconds), counted from when the schedule is set.
    pub fn every(interval: Duration, payload: impl IntoPayload) -> Self {
        Self::new(format!("every {}", interval.as_millis()), payload)
    }

    fn new(spec: String, payload: impl IntoPayload) -> Self {
        Schedule {
            spec,
            payload: payload.into_payload(),
            timezone: "UTC".into(),
            retry_count: None,
            backoff: None,
            group: None,
            misfire: Misfire::default(),
            grace: DEFAULT_MISFIRE_GRACE,
        }
    }

    /// The IANA time zone the cron expression is read in, e.g.
    /// `"America/New_York"` (default `"UTC"`). See docs/schedules.md for
    /// what happens when the clocks change.
    pub fn timezone(mut self, tz: &str) -> Self {
        self.timezone = tz.to_string();
        self
    }

    /// Retries of each fire's message (default: the queue's).
    pub fn retry_count(mut self, n: u32) -> Self {
        self.retry_count = Some(n);
        self
    }

    /// Each fire's message's own [`Backoff`] (fixed or exponential).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Each fire's message's group ([`NewMessage::group`](crate::NewMessage::group),
    /// docs/groups.md). In a sharded queue a fire lives in its schedule's
    /// shard, so a group's limits hold per shard for scheduled messages.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// What to do with fires missed by more than the grace (default
    /// [`Misfire::FireOnce`]).
    pub fn misfire(mut self, misfire: Misfire) -> Self {
        self.misfire = misfire;
        self
    }

    /// How late a fire may still be sent as it is (default 60 s); older
    /// unsent fires are misfires. At least 1 s.
    pub fn misfire_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Checks everything but the payload; the timing it describes.
    pub(crate) fn timing(&self) -> Result<Timing, Error> {
        if let Some(n) = self.retry_count {
            if n > MAX_RETRY_COUNT {
                return Err(Error::InvalidArgument(format!(
                    "retry_count must be at most {MAX_RETRY_COUNT}"
                )));
            }
        }
        if let Some(b) = &self.backoff {
            b.validate()?;
        }
        if let Some(g) = &self.group {
            crate::maxima::check_group(g)?;
        }
        if self.grace < Duration::from_secs(1) || self.grace > MAX_DELAY {
            return Err(Error::InvalidArgument("misfire_grace must be 1 s to MAX_DELAY".into()));
        }
        Timing::parse(
            &self.spec,
            &self.timezone,
            self.misfire,
            self.grace.as_millis() as i64,
            0,
        )
        .map_err(Error::InvalidArgument)
    }

    /// The next `n` fire times after `after`, for a schedule set at `after`.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use delayqueue::Schedule;
    /// let daily = Schedule::cron("0 0 12 * * *", "noon").timezone("Europe/Berlin");
    /// // 2026-03-28 00:00 UTC: noon in Berlin is 11:00 UTC, then 10:00 UTC once summer time began.
    /// let t = UNIX_EPOCH + Duration::from_secs(1_774_656_000);
    /// let fires = daily.next_fires(t, 2).unwrap();
    /// assert_eq!(fires[0], t + Duration::from_secs(11 * 3600));
    /// assert_eq!(fires[1], t + Duration::from_secs(24 * 3600 + 10 * 3600));
    /// ```
    pub fn next_fires(&self, after: SystemTime, n: usize) -> Result<Vec<SystemTime>, Error> {
        let start = to_ms(after);
        let mut timing = self.timing()?;
        timing.anchor_ms = start;
        let mut out = Vec::with_capacity(n.min(1000));
        let mut at = start;
        while out.len() < n {
            match timing.next_after(at) {
                Some(next) => {
                    out.push(from_ms(next));
                    at = next;
                }
                None => break,
            }
        }
        Ok(out)
    }
}

/// A stored schedule, read: [`DelayQueue::schedules`](crate::DelayQueue::schedules).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The schedule's name.
    pub name: String,
    /// `"cron <expression>"` or `"every <ms>"`.
    pub spec: String,
    /// The IANA time zone of a cron expression.
    pub timezone: String,
    /// Paused: it fires nothing until resumed.
    pub paused: bool,
    /// The fire time of the last fire sent (fires are sent ahead of their
    /// time, so it may be in the future); none before the first, and after
    /// a change withdrew the fires sent ahead.
    pub last_fire: Option<SystemTime>,
    /// The next fire time after now, whether sent ahead already or not
    /// (none while paused, or when the expression never matches again).
    pub next_fire: Option<SystemTime>,
    /// Fires sent since the schedule was created, less those a change
    /// withdrew before they were due: what its handler will see.
    pub fired: u64,
    /// What happens to fires missed by more than the grace.
    pub misfire: Misfire,
    /// How late a fire may still be sent as it is.
    pub misfire_grace: Duration,
    /// Retries of each fire's message.
    pub retry_count: u32,
    /// Each fire's payload.
    pub payload: Payload,
}

/// When a schedule fires: the pure part of a stored schedule.
#[derive(Debug, Clone)]
pub(crate) struct Timing {
    kind: Kind,
    pub misfire: Misfire,
    /// Fires later than this (ms) are misfires.
    pub grace_ms: i64,
    /// Where an interval counts from (ms since the epoch).
    pub anchor_ms: i64,
}

#[derive(Debug, Clone)]
enum Kind {
    Cron(Box<Cron>, Tz),
    Every(i64),
}

impl Timing {
    /// Reads a spec (`"cron <expr>"`, `"every <ms>"`) in time zone `tz`.
    pub(crate) fn parse(spec: &str, tz: &str, misfire: Misfire, grace_ms: i64, anchor_ms: i64) -> Result<Self, String> {
        let kind = match spec.split_once(' ') {
            Some(("cron", expr)) => {
                let cron = CronParser::builder()
                    .seconds(Seconds::Optional)
                    .year(Year::Disallowed)
                    .build()
                    .parse(expr)
                    .map_err(|e| format!("cron expression {expr:?}: {e}"))?;
                let tz = Tz::from_str(tz).map_err(|_| format!("unknown time zone {tz:?} (an IANA name)"))?;
                Kind::Cron(Box::new(cron), tz)
            }
            Some(("every", ms)) => {
                let ms: i64 = ms.parse().map_err(|_| format!("interval {ms:?}"))?;
                if ms < MIN_INTERVAL.as_millis() as i64 || ms > MAX_DELAY.as_millis() as i64 {
                    return Err(format!("interval must be {MIN_INTERVAL:?} to MAX_DELAY"));
                }
                Kind::Every(ms)
            }
            _ => return Err(format!("schedule spec {spec:?}")),
        };
        Ok(Timing {
            kind,
            misfire,
            grace_ms,
            anchor_ms,
        })
    }

    /// The most fires [`plan`] gives with `horizon` (ms), however many
    /// rounds it takes: those late by less than the grace and those up to
    /// the horizon, at least the shortest gap apart (a cron expression's
    /// finest field is the second), one misfire sent once, and the next
    /// fire beyond the horizon.
    pub(crate) fn most_fires(&self, horizon: i64) -> usize {
        let gap = match &self.kind {
            Kind::Every(every) => *every,
            Kind::Cron(..) => 1000,
        };
        usize::try_from((self.grace_ms + horizon) / gap + 3).unwrap_or(usize::MAX)
    }

    /// The first fire time strictly after `ms`, in ms since the epoch.
    pub(crate) fn next_after(&self, ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every(every) => {
                let k = (ms - self.anchor_ms).div_euclid(*every) + 1;
                Some(self.anchor_ms + k.max(1) * every)
            }
            Kind::Cron(cron, tz) => {
                let start = tz.timestamp_millis_opt(ms).single()?;
                let next: DateTime<Tz> = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp_millis())
            }
        }
    }
}

/// One fire to send: its time, and the cursor to set with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub at_ms: i64,
    pub cursor_ms: i64,
}

/// The fires a scheduler sends now, in order, at most `max`: every fire
/// up to `now + horizon`, and the next one however far when none is
/// pending (`cursor <= now`), so the next fire is always stored ahead;
/// a fire older than the grace is a misfire, skipped or sent once. All
/// times in ms since the epoch; `cursor` is the last fire sent.
pub(crate) fn plan(t: &Timing, cursor: i64, now: i64, horizon: i64, max: usize) -> Vec<Step> {
    let mut out = Vec::new();
    let missed_before = now - t.grace_ms;
    let mut c = cursor;
    for _ in 0..2 * max {
        if out.len() >= max {
            break;
        }
        let Some(f) = t.next_after(c) else { break };
        if (c > now && f > now + horizon) || f - now > MAX_DELAY.as_millis() as i64 {
            break;
        }
        if f < missed_before {
            // Fires from `missed_before` on are not missed.
            let skip_to = (missed_before - 1).max(f);
            if t.misfire == Misfire::FireOnce {
                out.push(Step {
                    at_ms: f,
                    cursor_ms: skip_to,
                });
            }
            c = skip_to;
            continue;
        }
        out.push(Step { at_ms: f, cursor_ms: f });
        c = f;
    }
    out
}

/// Checks a schedule name: it becomes part of key names and of its fires'
/// ids (`{<name>}@<ms>`).
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        Some("must not be empty".to_string())
    } else if name.len() > MAX_SCHEDULE_NAME_LEN {
        Some(format!("must be at most {MAX_SCHEDULE_NAME_LEN} bytes"))
    } else {
        name.chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/')))
            .map(|c| format!("contains {c:?}; allowed are ASCII letters, digits and - _ . : /"))
    };
    match reason {
        Some(reason) => Err(Error::InvalidArgument(format!("schedule name {name:?} {reason}"))),
        None => Ok(()),
    }
}

/// The id of the fire of schedule `name` at `at_ms`: the name in braces,
/// so every fire of a schedule lands in the shard of its schedule.
pub(crate) fn fire_id(name: &str, at_ms: i64) -> String {
    format!("{{{name}}}@{at_ms}")
}

pub(crate) fn to_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

pub(crate) fn from_ms(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    const H: i64 = 3_600_000;

    fn cron(expr: &str, tz: &str) -> Timing {
        Timing::parse(&format!("cron {expr}"), tz, Misfire::Skip, 60_000, 0).unwrap()
    }

    /// Ms since the epoch of a wall-clock time in `tz` (the earlier one
    /// when it occurs twice).
    fn local(tz: &str, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        let tz = Tz::from_str(tz).unwrap();
        let naive = NaiveDate::from_ymd_opt(y, mo, d)
            .unwrap()
            .and_hms_opt(h, mi, 0)
            .unwrap();
        tz.from_local_datetime(&naive).earliest().unwrap().timestamp_millis()
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        local("UTC", y, mo, d, h, mi)
    }

    fn fires(t: &Timing, from: i64, n: usize) -> Vec<i64> {
        let mut out = vec![];
        let mut at = from;
        for _ in 0..n {
            at = t.next_after(at).unwrap();
            out.push(at);
        }
        out
    }

    #[test]
    fn a_daily_fire_in_the_hour_clocks_skip_fires_once_right_after_the_gap() {
        // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
        let t = cron("30 2 * * *", "Europe/Berlin");
        let got = fires(&t, utc(2026, 3, 27, 12, 0), 3);
        assert_eq!(
            got,
            [
                utc(2026, 3, 28, 1, 30), // 02:30 CET
                utc(2026, 3, 29, 1, 0),  // 03:00 CEST, the first minute after the gap: no day skipped
                utc(2026, 3, 30, 0, 30), // 02:30 CEST
            ]
        );
        // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT.
        let t = cron("30 2 * * *", "America/New_York");
        let got = fires(&t, utc(2026, 3, 7, 12, 0), 2);
        assert_eq!(got, [utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]);
    }

    #[test]
    fn a_daily_fire_in_the_hour_clocks_repeat_fires_once() {
        // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 occurs twice.
        let t = cron("30 2 * * *", "Europe/Berlin");
        let got = fires(&t, utc(2026, 10, 24, 12, 0), 2);
        assert_eq!(got, [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]);
        // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 occurs twice.
        let t = cron("0 30 1 * * *", "America/New_York");
        let got = fires(&t, utc(2026, 10, 31, 12, 0), 2);
        assert_eq!(got, [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]);
    }

    #[test]
    fn an_hourly_fire_follows_real_time_across_both_changes() {
        // Every 30 min: elapsed time between fires is always 30 min, the
        // repeated hour has its fires twice and the skipped hour none.
        let t = cron("*/30 * * * *", "Europe/Berlin");
        let start = utc(2026, 10, 24, 23, 0);
        let got = fires(&t, start, 8);
        let steps: Vec<i64> = got.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(steps.iter().all(|&s| s == H / 2), "{got:?}");
        let t = cron("0 * * * *", "America/New_York");
        let got = fires(&t, utc(2026, 3, 8, 5, 30), 3);
        // 01:00 EST, then 03:00 EDT (02:00 does not exist), then 04:00 EDT.
        assert_eq!(
            got,
            [utc(2026, 3, 8, 6, 0), utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 8, 0)]
        );
        assert_eq!(local("America/New_York", 2026, 3, 8, 3, 0), utc(2026, 3, 8, 7, 0));
    }

    #[test]
    fn seconds_are_optional_and_bad_specs_are_refused() {
        let t = cron("*/5 * * * * *", "UTC");
        assert_eq!(t.next_after(1_500), Some(5_000));
        assert_eq!(cron("* * * * *", "UTC").next_after(1_500), Some(60_000));
        for (spec, tz) in [
            ("cron 61 * * * *", "UTC"),
            ("cron * * * *", "UTC"),
            ("cron * * * * *", "Mars/Olympus"),
            ("every 999", "UTC"),
            ("every x", "UTC"),
            ("hourly", "UTC"),
        ] {
            assert!(Timing::parse(spec, tz, Misfire::Skip, 1000, 0).is_err(), "{spec} {tz}");
        }
    }

    #[test]
    fn an_interval_counts_from_its_anchor() {
        let t = Timing::parse("every 1000", "UTC", Misfire::Skip, 60_000, 10_500).unwrap();
        assert_eq!(t.next_after(10_500), Some(11_500));
        assert_eq!(t.next_after(11_499), Some(11_500));
        assert_eq!(t.next_after(11_500), Some(12_500));
    }

    fn every_second(misfire: Misfire) -> Timing {
        Timing::parse("every 1000", "UTC", misfire, 5_000, 0).unwrap()
    }

    #[test]
    fn plan_keeps_the_next_fire_and_the_horizon_sent() {
        let t = every_second(Misfire::Skip);
        // Last fire 10 000 sent and due: the next ones up to now + 2 s.
        let at: Vec<i64> = plan(&t, 10_000, 10_200, 2_000, 16).iter().map(|s| s.at_ms).collect();
        assert_eq!(at, [11_000, 12_000]);
        // 12 000 pending and beyond the horizon's next: nothing.
        assert!(plan(&t, 12_000, 10_300, 1_000, 16).is_empty());
        // A daily schedule: the next fire, a day ahead, is sent at once.
        let daily = cron("0 0 * * *", "UTC");
        assert_eq!(plan(&daily, 1_000, 1_000, 2_000, 16)[0].at_ms, 24 * H);
        assert!(plan(&daily, 24 * H, 1_000, 2_000, 16).is_empty());
    }

    #[test]
    fn plan_sends_late_fires_within_the_grace_and_misfires_by_policy() {
        // Last fire at 0, now 20 s later, grace 5 s: 1..14 s are misfires.
        let skip = plan(&every_second(Misfire::Skip), 0, 20_000, 1_000, 16);
        let at: Vec<i64> = skip.iter().map(|s| s.at_ms).collect();
        assert_eq!(at, [15_000, 16_000, 17_000, 18_000, 19_000, 20_000, 21_000]);
        let once = plan(&every_second(Misfire::FireOnce), 0, 20_000, 1_000, 16);
        assert_eq!(
            once[0],
            Step {
                at_ms: 1_000,
                cursor_ms: 14_999
            }
        );
        assert_eq!(once[1..], skip[..]);
        // Bounded.
        assert_eq!(plan(&every_second(Misfire::Skip), 0, 20_000, 1_000, 3).len(), 3);
    }

    #[test]
    fn names_and_ids() {
        assert!(check_name("daily-report.v2:eu/1").is_ok());
        for bad in ["", "a b", "a{b", "a}b", "a@b", &"x".repeat(101)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(fire_id("daily", 5), "{daily}@5");
        assert_eq!(to_ms(from_ms(-5)), -5);
    }
}
