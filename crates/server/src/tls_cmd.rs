//! `schedstate tls`: a private CA and the certificates a cluster needs, so that a
//! secure setup takes no other tool. File names follow Nomad's:
//! `schedstate-agent-ca.pem` / `-key.pem`, `<region>-server-schedstate-<n>.pem`,
//! `<region>-client-schedstate-<n>.pem`, `<region>-cli-schedstate-<n>.pem` (the first
//! free `n`). Keys are written mode 0600; nothing is ever overwritten.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use schedstate_agent::certs::{Ca, CertKind, write_pem_files};
use schedstate_agent::tls::DEFAULT_REGION;
use schedstate_cli::output::{CliError, err};

/// The CA's file name stem.
pub const CA_STEM: &str = "schedstate-agent-ca";

/// `tls`.
#[derive(Debug, Subcommand)]
pub enum TlsCmd {
    /// A private certificate authority.
    Ca {
        #[command(subcommand)]
        command: CaCmd,
    },
    /// Certificates signed by the CA.
    Cert {
        #[command(subcommand)]
        command: CertCmd,
    },
}

/// `tls ca`.
#[derive(Debug, Subcommand)]
pub enum CaCmd {
    /// Create a CA: schedstate-agent-ca.pem and schedstate-agent-ca-key.pem.
    Create {
        /// Where to write the files.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Days the CA is valid.
        #[arg(long, default_value_t = 1825)]
        days: u32,
        /// The CA's common name.
        #[arg(long, default_value = "schedstate agent CA")]
        common_name: String,
    },
}

/// `tls cert`.
#[derive(Debug, Subcommand)]
pub enum CertCmd {
    /// Create a certificate for a server, a client agent or a CLI user.
    Create(CertArgs),
}

/// `tls cert create`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("kind").required(true).multiple(false)))]
pub struct CertArgs {
    /// A server's certificate (server.<region>.schedstate, localhost, 127.0.0.1, ::1;
    /// serves TLS and calls other servers).
    #[arg(long, group = "kind")]
    pub server: bool,
    /// A client agent's certificate.
    #[arg(long, group = "kind")]
    pub client: bool,
    /// A CLI or API user's certificate (client use only).
    #[arg(long, group = "kind")]
    pub cli: bool,
    /// The region of the server.
    #[arg(long, default_value = DEFAULT_REGION)]
    pub region: String,
    /// The CA certificate.
    #[arg(long, default_value = "schedstate-agent-ca.pem")]
    pub ca: PathBuf,
    /// The CA's key.
    #[arg(long, default_value = "schedstate-agent-ca-key.pem")]
    pub key: PathBuf,
    /// More DNS names for a server (the names clients dial it by).
    #[arg(long = "additional-dnsname", value_name = "NAME")]
    pub dns: Vec<String>,
    /// More IP addresses for a server.
    #[arg(long = "additional-ipaddress", value_name = "IP")]
    pub ips: Vec<IpAddr>,
    /// Days the certificate is valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Where to write the files.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

/// The first `<prefix>-<n>` with no file in `dir`.
fn free_stem(dir: &Path, prefix: &str) -> String {
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .find(|stem| {
            !dir.join(format!("{stem}.pem")).exists()
                && !dir.join(format!("{stem}-key.pem")).exists()
        })
        .unwrap_or_else(|| prefix.to_string())
}

/// `tls`.
pub fn run(command: TlsCmd) -> Result<(), CliError> {
    match command {
        TlsCmd::Ca {
            command:
                CaCmd::Create {
                    dir,
                    days,
                    common_name,
                },
        } => {
            let ca = Ca::create(&common_name, days).map_err(|e| err(e.to_string()))?;
            let (cert, key) =
                write_pem_files(&dir, CA_STEM, &ca).map_err(|e| err(e.to_string()))?;
            println!("==> CA certificate saved to: {}", cert.display());
            println!("==> CA certificate key saved to: {}", key.display());
            Ok(())
        }
        TlsCmd::Cert {
            command: CertCmd::Create(a),
        } => {
            let ca = Ca::load(&a.ca, &a.key).map_err(|e| err(e.to_string()))?;
            let (kind, role) = if a.server {
                (
                    CertKind::Server {
                        region: a.region.clone(),
                    },
                    "server",
                )
            } else if a.client {
                (CertKind::Client, "client")
            } else {
                (CertKind::Cli, "cli")
            };
            if !a.server && (!a.dns.is_empty() || !a.ips.is_empty()) {
                return Err(err(
                    "--additional-dnsname and --additional-ipaddress are for --server",
                ));
            }
            let issued = ca
                .issue(&kind, &a.dns, &a.ips, a.days)
                .map_err(|e| err(e.to_string()))?;
            let stem = free_stem(&a.dir, &format!("{}-{role}-schedstate", a.region));
            let (cert, key) =
                write_pem_files(&a.dir, &stem, &issued).map_err(|e| err(e.to_string()))?;
            println!(
                "==> Using CA file {} and CA key {}",
                a.ca.display(),
                a.key.display()
            );
            println!("==> Certificate saved to: {}", cert.display());
            println!("==> Certificate key saved to: {}", key.display());
            Ok(())
        }
    }
}
