//! Asking several servers at once, the first answer winning.

use std::time::Duration;

use futures::StreamExt;
use redis::Client;

/// Asks every one of `servers` at once with `ask`, each within `timeout`:
/// the first answer wins; `Err` with what each said (`address: why`) when
/// none answers.
///
/// Cancel safe: it only reads.
pub(super) async fn first_answer<T, F, Fut>(
    servers: &[Client],
    timeout: Duration,
    ask: F,
) -> Result<T, Vec<String>>
where
    F: Fn(Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let asks = servers.iter().map(|server| {
        let addr = server.get_connection_info().addr().to_string();
        let asked = tokio::time::timeout(timeout, ask(server.clone()));
        async move {
            match asked.await {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(why)) => Err(format!("{addr}: {why}")),
                Err(_) => Err(format!("{addr}: no answer within {timeout:?}")),
            }
        }
    });
    let mut asks: futures::stream::FuturesUnordered<_> = asks.collect();
    let mut answers = Vec::new();
    while let Some(answer) = asks.next().await {
        match answer {
            Ok(answer) => return Ok(answer),
            Err(why) => answers.push(why),
        }
    }
    Err(answers)
}
