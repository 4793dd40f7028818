//! The handshake on quorlock's own connection (`pipelined.rs`): what the
//! `redis` crate sends on a new RESP2 connection, from the same settings.

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, Value};

use super::pipelined::Pipelined;

/// The handshake the `redis` crate makes on a RESP2 connection, from
/// `info`: `AUTH` where there is a password (without the user name where
/// the server predates users), `SELECT` where the database is not 0, and
/// the client's library name and version (`CLIENT SETINFO`, whose refusal
/// by an older server is ignored, as the `redis` crate ignores it). The
/// name sent is always `quorlock` and its version, unless the URL's
/// settings skip it.
///
/// # Errors
///
/// The connection's error, an authentication the server refused
/// ([`ErrorKind::AuthenticationFailed`]), or a database it refused.
///
/// Cancel safety: cancel safe, as the calls are; a connection whose
/// handshake was dropped must not be used.
pub(crate) async fn handshake(
    connection: &mut Pipelined,
    info: &redis::RedisConnectionInfo,
) -> Result<(), RedisError> {
    if let Some(password) = info.password() {
        let mut auth = redis::cmd("AUTH");
        if let Some(username) = info.username() {
            auth.arg(username);
        }
        auth.arg(password);
        let mut answer = connection.req_packed_command(&auth).await?;
        let old_server = |answer: &Value| {
            matches!(answer, Value::ServerError(err)
            if err.details().is_some_and(|details| {
                details.contains("wrong number of arguments for 'auth' command")
            }))
        };
        if info.username().is_some() && old_server(&answer) {
            answer = connection
                .req_packed_command(redis::cmd("AUTH").arg(password))
                .await?;
        }
        if answer != Value::Okay {
            return Err(RedisError::from((
                ErrorKind::AuthenticationFailed,
                "Password authentication failed",
            )));
        }
    }
    let mut setup = redis::pipe();
    if info.db() != 0 {
        setup.cmd("SELECT").arg(info.db());
    }
    if !info.skip_set_lib_name() {
        // Always quorlock's own name and version: the settings for another
        // name (`lib_name`) came after redis 1.0.3, the lowest version
        // Cargo.toml allows, so they are not read.
        setup
            .cmd("CLIENT")
            .arg("SETINFO")
            .arg("LIB-NAME")
            .arg("quorlock");
        setup
            .cmd("CLIENT")
            .arg("SETINFO")
            .arg("LIB-VER")
            .arg(env!("CARGO_PKG_VERSION"));
    }
    if setup.is_empty() {
        return Ok(());
    }
    let answers = connection
        .req_packed_commands(&setup, 0, setup.len())
        .await?;
    match answers.first() {
        Some(Value::ServerError(err)) if info.db() != 0 => Err(RedisError::from((
            ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "Redis server refused to switch database",
            err.details().unwrap_or_default().to_owned(),
        ))),
        _ => Ok(()),
    }
}
