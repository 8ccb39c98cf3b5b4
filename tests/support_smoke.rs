//! Smoke tests for the shared `support` module itself.

use delayqueue_test_support as support;

use std::time::Duration;

use fred::prelude::*;
use support::{RedisServer, ServerOptions};

#[tokio::test]
async fn start_and_ping_via_fred() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let pong: String = client.ping(None).await.expect("PING via fred");
    assert_eq!(pong, "PONG");
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert!(server.dir().exists());
    client.quit().await.expect("QUIT");
}

#[tokio::test]
async fn restart_keeps_data_with_aof_always() {
    let mut server = RedisServer::start_with(ServerOptions {
        appendonly: true,
        appendfsync: Some("always".into()),
        ..Default::default()
    })
    .await;
    let port = server.port();
    let client = server.client().await;
    let _: () = client
        .set("support:key", "survives", None, None, false)
        .await
        .expect("SET before restart");

    server.restart().await;
    assert_eq!(server.port(), port, "restart must keep the port");

    // The same client must reconnect on its own; bound the wait.
    let value: Option<String> = tokio::time::timeout(Duration::from_secs(15), client.get("support:key"))
        .await
        .expect("GET after restart timed out (client did not reconnect)")
        .expect("GET after restart");
    assert_eq!(value.as_deref(), Some("survives"));
    let _ = client.quit().await;
}

#[tokio::test]
async fn raw_command_works() {
    let server = RedisServer::start().await;
    assert_eq!(server.raw_command(&["PING"]), "PONG");
    assert_eq!(server.raw_command(&["SET", "k", "hello world"]), "OK");
    assert_eq!(server.raw_command(&["GET", "k"]), "hello world");
    assert_eq!(server.raw_command(&["GET", "missing"]), "(nil)");
    assert_eq!(server.raw_command(&["RPUSH", "l", "a", "b", "c"]), "3");
    assert_eq!(server.raw_command(&["LRANGE", "l", "0", "-1"]), "a\nb\nc");
    assert!(server.raw_command(&["NOSUCHCOMMAND"]).starts_with("-ERR"));
    assert_eq!(server.raw_reply(&["INCRBY", "n", "5"]), support::RawReply::Integer(5));
}
