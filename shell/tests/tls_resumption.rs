//! The TLS streams over real loopback sockets: a client connecting again resumes its session
//! (no certificate crosses either way), and the server still knows the client's certificate.

use flint_shell::meter::{ConnMeter, CountingIo};
use flint_shell::tls::client::{TlsDial, client_config};
use flint_shell::tls::server::{Served, server_config};
use flint_shell::tls::{common_name, generate_pki};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::Connected;

#[tokio::test]
async fn a_client_connecting_again_resumes_and_the_server_still_knows_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = generate_pki(
        dir.path(),
        &["127.0.0.1".to_string()],
        &["client-1".to_string()],
        false,
        1,
    )
    .unwrap();
    let read = |p: std::path::PathBuf| std::fs::read(p).unwrap();
    let server = server_config(
        &read(pki.server_cert()),
        &read(pki.server_key()),
        Some(&read(pki.ca_cert())),
    )
    .unwrap();
    let (cert, key) = pki.client("client-1");
    let client = client_config(&read(pki.ca_cert()), Some((&read(cert), &read(key)))).unwrap();
    let dial = TlsDial::new(client, "127.0.0.1").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();

    let mut sent = Vec::new();
    for _ in 0..2 {
        let (meter, server_meter) = (ConnMeter::default(), ConnMeter::default());
        let (mut served, mut tls) = tokio::join!(
            async {
                let (tcp, _) = listener.accept().await.unwrap();
                let counted = CountingIo::new(tcp, server_meter.clone());
                Served::accept(server.clone(), counted).await.unwrap()
            },
            async {
                let tcp = TcpStream::connect(addr).await.unwrap();
                dial.connect(CountingIo::new(tcp, meter.clone()))
                    .await
                    .unwrap()
            }
        );
        tls.write_all(b"ping").await.unwrap();
        tls.flush().await.unwrap();
        let mut ping = [0u8; 4];
        served.read_exact(&mut ping).await.unwrap();
        served.write_all(b"pong").await.unwrap();
        served.flush().await.unwrap();
        let mut pong = [0u8; 4];
        tls.read_exact(&mut pong).await.unwrap();
        assert_eq!((&ping, &pong), (b"ping", b"pong"));
        let certs = served
            .connect_info()
            .peer_certs
            .expect("mutual TLS: the client's certificate");
        assert_eq!(common_name(&certs[0]).as_deref(), Some("client-1"));
        let resumed = tls.get_ref().get_ref().1.handshake_kind();
        sent.push((server_meter.written(), meter.written(), resumed));
    }
    let (first, again) = (sent[0], sent[1]);
    assert_eq!(first.2, Some(rustls::HandshakeKind::Full), "{sent:?}");
    assert_eq!(again.2, Some(rustls::HandshakeKind::Resumed), "{sent:?}");
    // The server's certificate chain and signature are not sent again. (The client's ticket
    // carries its certificate back, sealed, so its side costs about as much.)
    assert!(again.0 + 500 < first.0, "{sent:?}");
    println!("server wrote, client wrote, handshake: {sent:?}");
}
