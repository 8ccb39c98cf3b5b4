//! Repeating schedules against a real redis-server: every fire delivered
//! exactly once by any number of schedulers across their restarts and
//! Redis's (AOF), none early, none missing; misfire policies; changes
//! withdraw the fires sent ahead; sharded queues.

mod helpers;
use delayqueue_test_support as support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::{Consumer, DelayQueue, Message, Schedule};
use helpers::queue_builder;
use support::{wait_for, RedisServer, ServerOptions, WAIT};

const FETCH: Duration = Duration::from_millis(200);

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The fire time in a fire's id `{<name>}@<ms>`.
fn fire_ms(id: &str) -> i64 {
    id.rsplit_once('@')
        .and_then(|(_, ms)| ms.parse().ok())
        .unwrap_or_else(|| panic!("not a fire id: {id}"))
}

/// Every delivery: (id, when the handler ran by this host's clock, ms).
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, i64)>>>);

impl Seen {
    fn handler(&self) -> impl delayqueue::Handler {
        let seen = self.clone();
        move |msg: Message| {
            seen.0.lock().unwrap().push((msg.id().as_str().to_string(), now_ms()));
            async move { Ok(()) }
        }
    }

    /// Deliveries per fire time.
    fn by_fire(&self) -> BTreeMap<i64, Vec<i64>> {
        let mut out: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (id, at) in self.0.lock().unwrap().iter() {
            out.entry(fire_ms(id)).or_default().push(*at);
        }
        out
    }
}

/// One scheduler instance: its own client, queue handle and consumer.
struct Instance {
    queue: DelayQueue,
    consumer: Option<Consumer>,
}

impl Instance {
    /// Starts like an application would: sets its schedule, then consumes.
    async fn start(server: &RedisServer, seen: &Seen) -> Instance {
        let client = server.client().await;
        let queue = queue_builder("cron", &client, FETCH).build().unwrap();
        let mut tries = 0;
        // Redis may be restarting.
        while let Err(e) = queue.set_schedule("tick", tick()).await {
            tries += 1;
            assert!(tries < 100, "set_schedule: {e}");
            tokio::time::sleep(FETCH).await;
        }
        let consumer = queue.start_consume(seen.handler()).await.unwrap();
        Instance {
            queue,
            consumer: Some(consumer),
        }
    }

    async fn stop(&mut self) {
        if let Some(c) = self.consumer.take() {
            c.shutdown().await.unwrap();
        }
    }
}

fn tick() -> Schedule {
    Schedule::every(Duration::from_secs(1), "tick")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_schedulers_send_each_fire_once_across_their_restarts_and_redis_restarts() {
    let mut server = RedisServer::start_with(ServerOptions::durable()).await;
    let seen = Seen::default();
    let set_at = now_ms();
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(Instance::start(&server, &seen).await);
    }
    let info = instances[0].queue.schedule("tick").await.unwrap().expect("set");
    assert_eq!(info.spec, "every 1000");
    // 66 s of fires; every 6 s one instance restarts, every third time Redis too.
    let started = Instant::now();
    let (mut restarts, mut redis_restarts) = (0, 0);
    for round in 1..=11u32 {
        let at = Duration::from_secs(6 * u64::from(round));
        support::wait_until(at + WAIT, || started.elapsed() >= at).await;
        let i = round as usize % 3;
        instances[i].stop().await;
        if round % 3 == 0 {
            server.restart().await;
            redis_restarts += 1;
        }
        instances[i] = Instance::start(&server, &seen).await;
        restarts += 1;
    }
    // Stop the schedule; fires after the pause are withdrawn.
    let before_pause = now_ms();
    assert!(instances[0].queue.pause_schedule("tick").await.unwrap());
    let after_pause = now_ms();
    let delivered_up_to = |t: i64| {
        let by_fire = seen.by_fire();
        by_fire.range(..=t).count() >= ((t - set_at) / 1000 - 1) as usize
    };
    assert!(
        wait_for(WAIT, || async { delivered_up_to(before_pause) }).await,
        "{:?}",
        seen.by_fire()
    );
    // The queue drains: nothing of the schedule is left anywhere.
    let queue = instances[0].queue.clone();
    assert!(
        wait_for(WAIT, || async {
            let c = queue.counts().await.unwrap();
            c.pending + c.ready + c.processing + c.retry + c.dead == 0
        })
        .await,
        "{:?}",
        queue.counts().await.unwrap()
    );
    for i in instances.iter_mut() {
        i.stop().await;
    }

    let by_fire = seen.by_fire();
    let fires: Vec<i64> = by_fire.keys().copied().collect();
    let twice: Vec<_> = by_fire.iter().filter(|(_, d)| d.len() != 1).collect();
    assert!(twice.is_empty(), "fires delivered more than once: {twice:?}");
    let early: Vec<_> = by_fire.iter().filter(|(f, d)| d[0] < **f).collect();
    assert!(early.is_empty(), "fires handled before their time: {early:?}");
    // Every second from the first fire (at most 1 s after the set) to the pause.
    let first = fires[0];
    assert!(
        first > set_at - 1000 && first <= set_at + 2000,
        "first fire {first}, set at {set_at}"
    );
    let gaps: Vec<_> = fires.windows(2).filter(|w| w[1] - w[0] != 1000).collect();
    assert!(gaps.is_empty(), "missing fires between {gaps:?}");
    let last = *fires.last().unwrap();
    assert!(
        last >= before_pause - 1000 && last <= after_pause + 1000,
        "last fire {last}, paused between {before_pause} and {after_pause}"
    );
    assert!(fires.len() >= 60, "{} fires", fires.len());
    let late = by_fire
        .values()
        .map(|d| d[0])
        .zip(&fires)
        .map(|(h, f)| h - f)
        .max()
        .unwrap();
    println!(
        "{} fires, each once; {restarts} scheduler restarts, {redis_restarts} Redis restarts; latest handled {late} ms after its fire time",
        fires.len()
    );
    let info = queue.schedule("tick").await.unwrap().unwrap();
    assert!(info.paused && info.next_fire.is_none());
    assert!(info.fired >= fires.len() as u64, "{info:?}");
}
