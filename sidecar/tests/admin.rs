//! The admin endpoint's handlers in-process: drain control is refused to callers that
//! are neither loopback nor carry the internal token, and `/healthz` follows the
//! driver's progress. The peer address is set with axum's `MockConnectInfo`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::connect_info::MockConnectInfo;
use sidecar::admin::{router, AdminState};
use sidecar::config::{Config, Secret};
use sidecar::driver::{Liveness, Sidecar};

/// Serve the admin router as if every caller came from `peer`; answers its base URL.
async fn serve(peer: &str, token: &str, liveness: Liveness) -> String {
    let config = Config::from_flags(["--lease-ttl", "6"]).unwrap();
    let sidecar = Sidecar::new(config).unwrap();
    let state = AdminState {
        telemetry: sidecar.telemetry(),
        status: sidecar.status(),
        liveness,
        requests: sidecar.requests(),
        token: Secret::new(token),
    };
    let peer: SocketAddr = peer.parse().unwrap();
    let app = router(state).layer(MockConnectInfo(peer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // The sidecar (and its request channel) lives as long as the server.
        let _keep = sidecar;
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

async fn post(url: String, token: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new().post(url);
    if let Some(token) = token {
        request = request.header("x-internal-token", token);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn drain_control_needs_loopback_or_the_token() {
    let alive = || Liveness::new(Duration::from_secs(60));
    let remote = serve("10.1.2.3:4000", "s3cret", alive()).await;
    assert_eq!(post(format!("{remote}/drain"), None).await, 403);
    assert_eq!(post(format!("{remote}/undrain"), None).await, 403);
    assert_eq!(post(format!("{remote}/drain"), Some("wrong")).await, 403);
    assert_eq!(post(format!("{remote}/drain"), Some("s3cret")).await, 202);
    assert_eq!(post(format!("{remote}/undrain"), Some("s3cret")).await, 202);

    // No token configured: a remote caller is always refused, even with an empty header.
    let no_token = serve("10.1.2.3:4000", "", alive()).await;
    assert_eq!(post(format!("{no_token}/drain"), Some("")).await, 403);

    let local = serve("127.0.0.1:4000", "s3cret", alive()).await;
    assert_eq!(post(format!("{local}/drain"), None).await, 202);
    let local6 = serve("[::1]:4000", "", alive()).await;
    assert_eq!(post(format!("{local6}/undrain"), None).await, 202);
}

#[tokio::test]
async fn healthz_fails_once_the_driver_stalls_past_its_budget() {
    let liveness = Liveness::new(Duration::from_millis(200));
    liveness.touch();
    let url = serve("127.0.0.1:1", "", liveness.clone()).await;
    let get = || async {
        reqwest::get(format!("{url}/healthz"))
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(get().await, 200);
    // No progress: past the budget, 503.
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while get().await != 503 {
        assert!(tokio::time::Instant::now() < until, "never 503");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(liveness.idle() > Duration::from_millis(200));
    liveness.touch();
    assert_eq!(get().await, 200);
}
