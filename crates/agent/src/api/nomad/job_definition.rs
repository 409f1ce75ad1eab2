//! A job's definition as its user registered it, kept whole beside the parsed parts
//! (`Job::definition`) and answered back as Nomad does.
//!
//! On registration the `Job` object of the body is kept with the parsed parts laid
//! over it as a read lays them (Nomad's defaults filled in) and the fields the store
//! owns left out ([`STORE_OWNED`]: id and namespace, status, version, indexes, submit
//! time), canonicalised — compact JSON, keys sorted (serde_json's map is ordered) — so
//! that registering the same job again, as read back from a `GET`, is the same
//! definition and no new version. At most [`MAX_DEFINITION_BYTES`] (1 MiB).
//!
//! On a read the stored definition is the answer, with the parsed row laid over it:
//! every store-owned field, the type, and per task group its name and count (Nomad's
//! defaults filled in), per task its name and its `CSIPluginConfig`'s `ID` and `Type`
//! (other keys of that stanza, like `MountDir`, kept). So what the store decides is
//! never stale, and everything else comes back as it was sent.

use schedstate::model::{Job, JobDefinition, MAX_DEFINITION_BYTES};
use serde_json::{Map, Value};

use super::job::NomadJob;

/// The fields of a Nomad job the store sets or takes from elsewhere: never kept in a
/// definition, always answered from the row.
pub const STORE_OWNED: [&str; 11] = [
    "ID",
    "Namespace",
    "Status",
    "StatusDescription",
    "Stop",
    "Version",
    "Stable",
    "SubmitTime",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
];

/// A definition larger than [`MAX_DEFINITION_BYTES`]: its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefinitionTooLarge(pub usize);

/// The definition to store for a registration's `Job` object, `parsed` being the job
/// parsed from it.
///
/// # Errors
/// [`DefinitionTooLarge`] past [`MAX_DEFINITION_BYTES`].
pub fn definition_of(
    object: &Map<String, Value>,
    parsed: &Job,
) -> Result<JobDefinition, DefinitionTooLarge> {
    let mut kept = object.clone();
    if let Ok(Value::Object(p)) = serde_json::to_value(NomadJob::from(parsed)) {
        lay_over(&mut kept, &p);
    }
    for key in STORE_OWNED {
        kept.remove(key);
    }
    let text = Value::Object(kept).to_string();
    if text.len() > MAX_DEFINITION_BYTES {
        return Err(DefinitionTooLarge(text.len()));
    }
    Ok(JobDefinition::new(text))
}

/// A job as a read answers it: the parsed shape, laid over the stored definition when
/// the job has one (a job registered before definitions were kept answers the
/// parsed shape alone).
pub fn job_answer(job: &Job) -> Value {
    let parsed = serde_json::to_value(NomadJob::from(job)).unwrap_or(Value::Null);
    let Some(stored) = job
        .definition
        .as_ref()
        .and_then(|d| serde_json::from_str::<Value>(d.as_str()).ok())
    else {
        return parsed;
    };
    let (Value::Object(mut out), Value::Object(parsed)) = (stored, parsed) else {
        return serde_json::to_value(NomadJob::from(job)).unwrap_or(Value::Null);
    };
    lay_over(&mut out, &parsed);
    Value::Object(out)
}

/// The parsed shape's fields over a job object: every field but the groups replaced
/// (the display name only where the object has none), the groups as
/// [`overlay_groups`] says.
fn lay_over(out: &mut Map<String, Value>, parsed: &Map<String, Value>) {
    for (key, value) in parsed {
        match key.as_str() {
            "TaskGroups" => overlay_groups(out, value),
            // The user's display name, if it gave one.
            "Name"
                if out
                    .get("Name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty()) => {}
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The parsed groups over the stored ones, index by index (both come from the same
/// array of the same registration).
fn overlay_groups(out: &mut Map<String, Value>, parsed: &Value) {
    let Some(parsed) = parsed.as_array() else {
        return;
    };
    let Some(Value::Array(stored)) = out.get_mut("TaskGroups") else {
        out.insert("TaskGroups".into(), Value::Array(parsed.clone()));
        return;
    };
    for (i, group) in parsed.iter().enumerate() {
        let Some(Value::Object(sg)) = stored.get_mut(i) else {
            continue;
        };
        for key in ["Name", "Count"] {
            if let Some(v) = group.get(key) {
                sg.insert(key.into(), v.clone());
            }
        }
        let Some(tasks) = group.get("Tasks").and_then(Value::as_array) else {
            continue;
        };
        let Some(Value::Array(stored_tasks)) = sg.get_mut("Tasks") else {
            sg.insert("Tasks".into(), Value::Array(tasks.clone()));
            continue;
        };
        for (j, task) in tasks.iter().enumerate() {
            let Some(Value::Object(st)) = stored_tasks.get_mut(j) else {
                continue;
            };
            if let Some(name) = task.get("Name") {
                st.insert("Name".into(), name.clone());
            }
            if let Some(Value::Object(plugin)) = task.get("CSIPluginConfig") {
                match st.get_mut("CSIPluginConfig") {
                    Some(Value::Object(sp)) => {
                        for (k, v) in plugin {
                            sp.insert(k.clone(), v.clone());
                        }
                    }
                    _ => {
                        st.insert("CSIPluginConfig".into(), Value::Object(plugin.clone()));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schedstate::model::JobStatus;
    use serde_json::json;

    fn registered() -> Value {
        json!({
            "ID": "ebs", "Namespace": "ops", "Type": "system", "Version": 7,
            "ModifyIndex": 99, "Status": "dead", "Datacenters": ["dc1"],
            "Meta": {"team": "storage"},
            "TaskGroups": [{"Name": "nodes", "Count": null, "Tasks": [{
                "Name": "plugin", "Driver": "docker",
                "Config": {"image": "ebs:1.25", "args": ["--node"]},
                "CSIPluginConfig": {"ID": "aws-ebs0", "Type": "node", "MountDir": "/csi"}
            }]}]
        })
    }

    fn parsed(v: &Value) -> Job {
        Job::try_from(serde_json::from_value::<NomadJob>(v.clone()).unwrap()).unwrap()
    }

    fn definition(v: &Value) -> Result<JobDefinition, DefinitionTooLarge> {
        definition_of(v.as_object().unwrap(), &parsed(v))
    }

    #[test]
    fn a_definition_drops_the_store_owned_fields_and_is_canonical() {
        let def = definition(&registered()).unwrap();
        let v: Value = serde_json::from_str(def.as_str()).unwrap();
        for key in STORE_OWNED {
            assert!(v.get(key).is_none(), "{key} kept");
        }
        assert_eq!(v["TaskGroups"][0]["Tasks"][0]["Driver"], "docker");
        // Keys sorted, compact: the same object in another order is the same text.
        let mut other = Map::new();
        for (k, val) in registered().as_object().unwrap().iter().rev() {
            other.insert(k.clone(), val.clone());
        }
        assert_eq!(definition(&Value::Object(other)).unwrap(), def);
        assert!(!def.as_str().contains(": "));
        let big = json!({"ID": "x", "Meta": {"blob": "x".repeat(MAX_DEFINITION_BYTES)}});
        assert!(definition(&big).is_err());
    }

    #[test]
    fn a_read_lays_the_row_over_the_definition() {
        let body = registered();
        let mut job = parsed(&body);
        job.definition = Some(definition(&body).unwrap());
        job.version = 2;
        job.status = JobStatus::Running;
        job.create_index = 5;
        job.modify_index = 8;
        job.job_modify_index = 6;
        let v = job_answer(&job);
        assert_eq!(v["ID"], "ebs");
        assert_eq!(v["Namespace"], "ops");
        assert_eq!(v["Version"], 2);
        assert_eq!(v["Status"], "running");
        assert_eq!(v["Stop"], false);
        assert_eq!(
            (v["CreateIndex"].clone(), v["ModifyIndex"].clone()),
            (json!(5), json!(8))
        );
        assert_eq!(v["JobModifyIndex"], 6);
        assert_eq!(v["Datacenters"], json!(["dc1"]));
        assert_eq!(v["Meta"]["team"], "storage");
        let g = &v["TaskGroups"][0];
        assert_eq!(g["Count"], 1, "Nomad's default filled in");
        let t = &g["Tasks"][0];
        assert_eq!(t["Driver"], "docker");
        assert_eq!(t["Config"]["args"], json!(["--node"]));
        assert_eq!(t["CSIPluginConfig"]["MountDir"], "/csi");
        assert_eq!(t["CSIPluginConfig"]["ID"], "aws-ebs0");
        // What it answers reads back as the same parsed job, and the same definition.
        let mut again = parsed(&v);
        again.definition = Some(definition(&v).unwrap());
        let unchanged = Job {
            status: JobStatus::Running,
            version: 2,
            create_index: 5,
            modify_index: 8,
            job_modify_index: 6,
            ..again.clone()
        };
        assert_eq!(unchanged, job);
        assert!(again.same_definition(&job));
    }

    #[test]
    fn a_job_without_a_definition_answers_its_parsed_parts() {
        let job = Job::new("default", "web");
        assert_eq!(
            job_answer(&job),
            serde_json::to_value(NomadJob::from(&job)).unwrap()
        );
    }
}
