//! How the server half reaches an agent: a client made from the command line's
//! [`Credentials`] (token, CA, client certificate).

use schedstate_agent::{Client, ClientTls};
use schedstate_cli::connect::Credentials;
use schedstate_cli::output::{CliError, err};

/// A client of the agent at `address` with `creds`.
pub fn client(creds: &Credentials, address: &str) -> Result<Client, CliError> {
    let token = creds.token()?;
    let client_cert = creds.client_cert()?;
    let tls = (creds.ca_cert.is_some() || client_cert.is_some()).then(|| ClientTls {
        ca_cert: creds.ca_cert.clone(),
        client_cert,
    });
    Client::with_tls(address, token, tls.as_ref()).map_err(|e| err(format!("agent {address}: {e}")))
}
