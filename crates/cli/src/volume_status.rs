//! `volume status`: the denormalized volumes, or one volume with its claims.

use clap::Args;
use schedstate::model::{CsiVolume, CsiVolumeClaim};

use crate::output::{CliError, emit, emit_json, find_one, key_values, render, serde_name, table};
use crate::server_half::ServerHalf;
use crate::source::{Source, SourceArgs};

/// Arguments of `volume status`.
#[derive(Debug, Args)]
pub struct VolumeArgs {
    /// A volume id (or a unique prefix of one); without it, every volume.
    pub id: Option<String>,
    /// Only this namespace (default: every namespace).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `volume status [ID] [--namespace NS]`.
pub fn volume(args: &VolumeArgs, server: &dyn ServerHalf) -> Result<(), CliError> {
    let source = Source::open(&args.source, server)?;
    let all = source.volumes(args.namespace.as_deref())?;
    let Some(wanted) = &args.id else {
        if args.json {
            return emit_json(&all);
        }
        if all.is_empty() {
            return emit("No CSI volumes\n");
        }
        let mut t = table([
            "ID",
            "Name",
            "Namespace",
            "Plugin ID",
            "Provider",
            "Schedulable",
            "Access Mode",
            "Readers",
            "Writers",
        ]);
        for vol in &all {
            t.add_row(vec![
                vol.id.to_string(),
                vol.name.clone(),
                vol.namespace.to_string(),
                vol.plugin_id.to_string(),
                vol.provider.to_string(),
                vol.schedulable.to_string(),
                serde_name(&vol.access_mode),
                vol.read_allocs.len().to_string(),
                vol.write_allocs.len().to_string(),
            ]);
        }
        crate::output::align_right(&mut t, &[7, 8]);
        return emit(&render(&t));
    };
    let vol = find_one(&all, wanted, "volume", |v: &CsiVolume| {
        (&*v.namespace, &*v.id)
    })?;
    if args.json {
        return emit_json(vol);
    }
    let caps: Vec<String> = vol
        .requested_capabilities
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                serde_name(&c.access_mode),
                serde_name(&c.attachment_mode)
            )
        })
        .collect();
    let mut out = key_values(&[
        ("ID", vol.id.to_string()),
        ("Name", vol.name.clone()),
        ("Namespace", vol.namespace.to_string()),
        ("External ID", vol.external_id.clone()),
        ("Plugin ID", vol.plugin_id.to_string()),
        ("Provider", vol.provider.to_string()),
        ("Version", vol.provider_version.to_string()),
        ("Schedulable", vol.schedulable.to_string()),
        ("Controller Required", vol.controller_required.to_string()),
        ("Controllers Healthy", vol.controllers_healthy.to_string()),
        ("Controllers Expected", vol.controllers_expected.to_string()),
        ("Nodes Healthy", vol.nodes_healthy.to_string()),
        ("Nodes Expected", vol.nodes_expected.to_string()),
        ("Capabilities", caps.join(", ")),
        ("Access Mode", serde_name(&vol.access_mode)),
        ("Attachment Mode", serde_name(&vol.attachment_mode)),
        (
            "Mount Options",
            vol.mount_options.as_ref().map_or_else(
                || "-".to_string(),
                |m| {
                    let flags = m.mount_flags.join(",");
                    format!("fs_type: {}, flags: {flags}", m.fs_type)
                },
            ),
        ),
        ("Create Index", vol.create_index.to_string()),
        ("Modify Index", vol.modify_index.to_string()),
    ]);
    out.push_str("\nClaims\n");
    out.push_str(&claims_table(&source, vol)?);
    emit(&out)
}

fn claims_table(source: &Source, vol: &CsiVolume) -> Result<String, CliError> {
    let sides: [(&str, &std::collections::BTreeMap<_, CsiVolumeClaim>); 3] = [
        ("read", &vol.read_claims),
        ("write", &vol.write_claims),
        ("past", &vol.past_claims),
    ];
    let mut t = table([
        "Alloc ID",
        "Node ID",
        "Claim",
        "State",
        "Access Mode",
        "Attachment Mode",
        "Alloc Status",
    ]);
    let mut any = false;
    for (side, claims) in sides {
        for c in claims.values() {
            any = true;
            let status = source.alloc(&c.alloc_id)?.map_or_else(
                || "gone".to_string(),
                |a| {
                    format!(
                        "{}/{}",
                        serde_name(&a.desired_status),
                        serde_name(&a.client_status)
                    )
                },
            );
            let claim = if side == "past" {
                format!("past ({})", serde_name(&c.mode))
            } else {
                side.to_string()
            };
            t.add_row(vec![
                c.alloc_id.to_string(),
                c.node_id.to_string(),
                claim,
                serde_name(&c.state),
                serde_name(&c.access_mode),
                serde_name(&c.attachment_mode),
                status,
            ]);
        }
    }
    Ok(if any {
        render(&t)
    } else {
        "No claims\n".to_string()
    })
}
