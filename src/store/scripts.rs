//! The one place that loads and calls the Lua scripts in `lua/`.
//!
//! `lua/prelude.lua` (shared helpers) is prepended to each script, after
//! the script's first line: its shebang (`#!lua flags=...`). The flags
//! decide what Redis does when it is out of memory: `send` has none, so
//! Redis refuses it before it runs (a send never half-writes), while the
//! consumer's scripts say `allow-oom`, so consumers keep draining, acking
//! and so freeing memory; read-only scripts say `no-writes`.
//!
//! Each script is one state transition. It is sent with `EVALSHA`; when
//! Redis answers NOSCRIPT (restart, failover, `SCRIPT FLUSH`) the call is
//! repeated once as `EVAL` with the whole source, which cannot fail with
//! NOSCRIPT and caches the script again. (Loading it and retrying `EVALSHA`
//! would fail again should another flush come in between.) A server that
//! cannot run Lua at all (Valkey 9 without its `lua` module) fails the
//! first call, whichever it is, with [`Error::ScriptingUnavailable`].

use std::sync::OnceLock;

use fred::prelude::{Client, ClientLike, FromValue, LuaInterface, Value};
use fred::types::scripts::Script;
use fred::types::MultipleKeys;

use crate::Error;

/// A script of `lua/`, known by its file name.
pub(crate) struct LuaScript {
    pub name: &'static str,
    pub(crate) file: &'static str,
    /// The assembled source and its SHA1, built at first use.
    script: OnceLock<(Script, String)>,
}

const PRELUDE: &str = include_str!("../../lua/prelude.lua");

macro_rules! lua_scripts {
    ($($konst:ident = $file:literal;)*) => {
        $(
            pub(crate) static $konst: LuaScript = LuaScript {
                name: $file,
                file: include_str!(concat!("../../lua/", $file, ".lua")),
                script: OnceLock::new(),
            };
        )*
        /// Every script, for tests and for loading them up front.
        #[cfg(test)]
        pub(crate) static ALL: &[&LuaScript] = &[$(&$konst),*];
    };
}

lua_scripts! {
    SEND = "send";
    PROMOTE = "promote";
    CLAIM = "claim";
    EXTEND = "extend";
    ACK = "ack";
    NACK = "nack";
    PAUSE = "pause";
    PROBE = "probe";
    SHARDS = "shards";
    FIRE = "fire";
    CHANGE_SCHEDULE = "change_schedule";
    READ_SCHEDULES = "read_schedules";
    LIMITS = "limits";
    TIMEOUT = "timeout";
    CANCEL = "cancel";
    RESCHEDULE = "reschedule";
    GC = "gc";
    REQUEUE = "requeue";
    PURGE = "purge";
    STATS = "stats";
    LIST = "list";
    WALK = "walk";
    GET = "get";
    SCAN = "scan";
    INSPECT = "inspect";
}

impl LuaScript {
    fn script(&self) -> &(Script, String) {
        self.script.get_or_init(|| {
            let source = self.source();
            (Script::from_lua(source.clone()), source)
        })
    }

    /// The shebang line, then the prelude's helpers the script uses, then
    /// the rest of the file.
    pub(crate) fn source(&self) -> String {
        let (shebang, body) = self.file.split_once('\n').unwrap_or((self.file, ""));
        format!("{shebang}\n{}{body}", prelude_for(body))
    }

    /// The SHA1 that `EVALSHA` names the script by.
    #[cfg(test)]
    pub(crate) fn sha1(&self) -> &str {
        self.script().0.sha1()
    }

    /// [`call`](Self::call) for queue `queue`, with Redis's errors turned
    /// into the crate's ([`Error::from_redis`]), and a server without Lua
    /// into [`Error::ScriptingUnavailable`].
    pub(crate) async fn run<R: FromValue>(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
        queue: &str,
    ) -> Result<R, Error> {
        match self.call(client, keys, args).await {
            Err(e) if lacks_lua(e.details()) => Err(Error::ScriptingUnavailable {
                server: server_name(client).await,
                detail: e.details().to_string(),
            }),
            result => result.map_err(|e| Error::from_redis(queue, e)),
        }
    }

    /// Runs the script with `EVALSHA`, or `EVAL` when Redis does not have it.
    pub(crate) async fn call<R: FromValue>(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<R, fred::error::Error> {
        tracing::trace!(script = self.name, keys = keys.len(), args = args.len(), "evalsha");
        let (script, source) = self.script();
        // Keys and values share their bytes when cloned (for the fallback):
        // no copy of the names and payloads on the way.
        let keys = MultipleKeys::from(keys);
        match client.evalsha(script.sha1().clone(), keys.clone(), args.clone()).await {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                // Routine: every script's first call on a server, and after a restart or flush.
                tracing::debug!(
                    script = self.name,
                    "script not in the server's cache yet; sending its source"
                );
                client.eval(source.as_str(), keys, args).await
            }
            result => result,
        }
    }
}

/// Whether a server's error says it cannot run Lua at all: Valkey 9
/// without its Lua module ("Could not find scripting engine 'lua'"), or a
/// server without the commands ("unknown command 'EVALSHA'", Redis and
/// Valkey alike).
fn lacks_lua(details: &str) -> bool {
    let details = details.to_ascii_lowercase();
    // The command's name, without the arguments that the error quotes.
    let head = details.split(", with args").next().unwrap_or_default();
    details.contains("could not find scripting engine") || (head.contains("unknown command") && head.contains("eval"))
}

/// The server's name and version from `INFO server` ("Valkey 9.1.2",
/// "Redis 7.0.15"), for an error message; "the Redis server" when it
/// cannot be read. Valkey also reports a `redis_version` (of the Redis it
/// is compatible with), so its own comes first.
async fn server_name(client: &Client) -> String {
    let info: String = client
        .info(Some(fred::types::InfoKind::Server))
        .await
        .unwrap_or_default();
    server_name_of(&info)
}

fn server_name_of(info: &str) -> String {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    match (field("valkey_version"), field("redis_version")) {
        (Some(v), _) => format!("Valkey {v}"),
        (None, Some(v)) => format!("Redis {v}"),
        (None, None) => "the Redis server".to_string(),
    }
}

/// The blocks of the prelude (separated by blank lines) that `body` needs:
/// those defining a name that the body's code or another needed block's
/// uses, and those defining none (comments). Every `local function` costs a
/// closure at each run of a script, which a single awaited send pays in its
/// round trip.
fn prelude_for(body: &str) -> String {
    let blocks: Vec<(&str, Vec<&str>)> = PRELUDE.split("\n\n").map(|b| (b, defined_names(b))).collect();
    let mut needed: Vec<bool> = blocks.iter().map(|(_, names)| names.is_empty()).collect();
    let mut users = vec![code_of(body)];
    while let Some(user) = users.pop() {
        for (i, (block, names)) in blocks.iter().enumerate() {
            if !needed[i] && names.iter().any(|name| uses(&user, name)) {
                needed[i] = true;
                users.push(code_of(block));
            }
        }
    }
    let mut out = String::with_capacity(PRELUDE.len());
    for ((block, _), _) in blocks.iter().zip(needed).filter(|(_, needed)| *needed) {
        out.push_str(block.trim_end_matches('\n'));
        out.push_str("\n\n");
    }
    out
}

/// The names a prelude block defines: `local function name(` and `local NAME =` at a line's start.
fn defined_names(block: &str) -> Vec<&str> {
    block
        .lines()
        .filter_map(|l| l.strip_prefix("local "))
        .map(|l| l.strip_prefix("function ").unwrap_or(l))
        .map(|l| l.split(|c: char| !is_ident(c)).next().unwrap_or_default())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Lua source without its comments (`--[[ ... ]]` blocks and `--` to the
/// end of a line), so that a name a comment mentions does not count as used.
fn code_of(lua: &str) -> String {
    let mut code = String::with_capacity(lua.len());
    let mut rest = lua;
    while let Some(at) = rest.find("--") {
        code.push_str(&rest[..at]);
        let comment = &rest[at..];
        let end = match comment.strip_prefix("--[[") {
            Some(block) => block.find("]]").map_or(comment.len(), |e| e + 6),
            None => comment.find('\n').unwrap_or(comment.len()),
        };
        rest = &comment[end..];
    }
    code.push_str(rest);
    code
}

/// Whether `text` holds `name` as a whole identifier.
fn uses(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_without_lua_is_told_apart_by_its_words() {
        // Valkey 9.1 after MODULE UNLOAD lua: EVALSHA says NOSCRIPT, then EVAL this.
        assert!(lacks_lua("ERR Could not find scripting engine 'lua'"));
        // A server or proxy without the commands (Redis's and Valkey's words).
        assert!(lacks_lua(
            "ERR unknown command 'EVALSHA', with args beginning with: '1d2b6c1e' '1' "
        ));
        assert!(lacks_lua("ERR unknown command `eval`, with args beginning with: "));
        // Errors of a running script are not.
        assert!(!lacks_lua(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'x'"
        ));
        assert!(!lacks_lua("NOSCRIPT No matching script."));
        assert!(!lacks_lua(
            "ERR unknown command 'FOO', with args beginning with: 'eval' "
        ));

        let valkey = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(server_name_of(valkey), "Valkey 9.1.2");
        assert_eq!(server_name_of("# Server\r\nredis_version:7.0.15\r\n"), "Redis 7.0.15");
        assert_eq!(server_name_of(""), "the Redis server");
    }

    #[test]
    fn every_script_documents_its_interface() {
        for s in ALL {
            assert!(s.file.starts_with("#!lua"), "lua/{}.lua lacks its shebang line", s.name);
            for part in ["KEYS[1]", "Returns", "Complexity", "Idempotent"] {
                assert!(s.file.contains(part), "lua/{}.lua header lacks {part}", s.name);
            }
            assert_eq!(s.sha1().len(), 40);
        }
    }

    #[test]
    fn docs_wire_format_has_every_script_header_verbatim_and_the_version() {
        let doc = include_str!("../../docs/wire-format.md");
        for s in ALL {
            let (shebang, rest) = s.file.split_once('\n').unwrap_or_default();
            let header = rest.split("]]").next().unwrap_or_default();
            let header = header.strip_prefix("--[[ ").unwrap_or(header).trim_end();
            let section = format!(
                "### `{}.lua`\n\nFirst line: `{shebang}`\n\n```text\n{header}\n```",
                s.name
            );
            assert!(
                doc.contains(&section),
                "docs/wire-format.md lacks lua/{}.lua's header as it is now",
                s.name
            );
        }
        let version = crate::store::stored::FORMAT_VERSION;
        assert!(doc.contains(&format!("speak **wire format version {version}**")));
        assert!(doc.contains(&format!("Pass ARGV[2] = `{version}`")));
    }

    #[test]
    fn a_script_gets_the_prelude_helpers_it_uses_and_no_others() {
        let send = SEND.source();
        for used in ["local function now_ms(", "local function check_types(", "local STALE ="] {
            assert!(send.contains(used), "send lacks {used}");
        }
        // wake_if_earlier calls wake: helpers of helpers come along.
        assert!(send.contains("local function wake("));
        for unused in [
            "local function members_of(",
            "local function bury(",
            "local MAX_LIMIT =",
        ] {
            assert!(!send.contains(unused), "send has {unused}");
        }
        // Every script still gets every helper its body names.
        for s in ALL {
            let source = s.source();
            for name in PRELUDE.split("\n\n").flat_map(defined_names) {
                if uses(&code_of(s.file), name) {
                    assert!(
                        defined_names(&source).contains(&name),
                        "lua/{}.lua lacks {name}",
                        s.name
                    );
                }
            }
        }
        assert!(uses("x = now_ms()", "now_ms") && !uses("now_ms_x()", "now_ms") && !uses("a_now_ms", "now_ms"));
        // Names in comments do not count.
        let code = code_of("--[[ count\n now_ms ]]\nlocal a = tally(1) -- wake\n-- bury\nreturn a");
        assert_eq!(code, "\nlocal a = tally(1) \n\nreturn a");
        assert!(
            !send.contains("local function count("),
            "send's header mentions a retry count"
        );
    }
}
