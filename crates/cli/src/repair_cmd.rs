//! `repair`: cut a data directory that no longer opens back to what it can prove
//! (`persist::repair_data_dir`), and say exactly what was dropped.

use clap::Args;
use schedstate::persist::repair_data_dir;

use crate::DataDir;
use crate::output::{CliError, bytes, emit, thousands};

/// Arguments of `repair`.
#[derive(Debug, Args)]
pub struct RepairArgs {
    #[command(flatten)]
    pub data: DataDir,
}

/// `repair`.
pub fn run(args: &RepairArgs) -> Result<(), CliError> {
    let dir = &args.data.dir;
    crate::output::refuse_server_dir(dir)?;
    let report = repair_data_dir(dir)?;
    if report.healthy {
        return emit(&format!(
            "{}: opens as it is (last applied index {}); nothing to repair\n",
            dir.display(),
            thousands(report.last_applied)
        ));
    }
    let mut out = format!(
        "{}: repaired; it now opens at last applied index {}\n",
        dir.display(),
        thousands(report.last_applied)
    );
    for d in &report.dropped {
        let lost = match d.lost_indexes {
            Some((first, last)) => format!(
                "{} whole log record(s) lost, indexes {} to {}",
                thousands(d.lost_records),
                thousands(first),
                thousands(last)
            ),
            None => "no whole log record in it".to_string(),
        };
        let what = if d.kept_bytes == 0 {
            format!("moved aside whole ({})", bytes(d.dropped_bytes))
        } else {
            format!(
                "cut back to {} (dropped {} from offset {})",
                bytes(d.kept_bytes),
                bytes(d.dropped_bytes),
                d.kept_bytes
            )
        };
        out.push_str(&format!(
            "  {}: {what}; {lost}\n    because: {}\n",
            d.path.display(),
            d.reason
        ));
    }
    if let Some(folder) = &report.damaged_dir {
        out.push_str(&format!(
            "The damaged files are kept, as found, in {}\n",
            folder.display()
        ));
    }
    emit(&out)
}
