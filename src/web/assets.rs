//! The page and its assets, embedded in the binary: no CDN, nothing
//! fetched at run time. `no-cache`: a browser revalidates after an upgrade.
//! The script is ES modules (`app.js` imports the others by relative URL),
//! served from the same place.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const LIB_JS: &str = include_str!("assets/lib.js");
const OVERVIEW_JS: &str = include_str!("assets/overview.js");
const GROUPS_JS: &str = include_str!("assets/groups.js");
const MESSAGE_JS: &str = include_str!("assets/message.js");
const FLOW_JS: &str = include_str!("assets/flow.js");
const CONSUMERS_JS: &str = include_str!("assets/consumers.js");
const APP_CSS: &str = include_str!("assets/app.css");
const FAVICON: &str = include_str!("assets/favicon.svg");

fn serve(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(crate) async fn index() -> Response {
    serve("text/html; charset=utf-8", INDEX)
}

pub(crate) async fn file(Path(file): Path<String>) -> Response {
    match file.as_str() {
        "app.js" => serve("text/javascript; charset=utf-8", APP_JS),
        "lib.js" => serve("text/javascript; charset=utf-8", LIB_JS),
        "overview.js" => serve("text/javascript; charset=utf-8", OVERVIEW_JS),
        "groups.js" => serve("text/javascript; charset=utf-8", GROUPS_JS),
        "message.js" => serve("text/javascript; charset=utf-8", MESSAGE_JS),
        "flow.js" => serve("text/javascript; charset=utf-8", FLOW_JS),
        "consumers.js" => serve("text/javascript; charset=utf-8", CONSUMERS_JS),
        "app.css" => serve("text/css; charset=utf-8", APP_CSS),
        "favicon.svg" => serve("image/svg+xml", FAVICON),
        _ => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
