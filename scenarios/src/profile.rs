//! Sidecar profiles: which implementation of the protocol the real cluster runs, how
//! each harness setting reaches it (a flag, an environment variable, or not at all), and
//! which capabilities beyond the contract it declares.
//!
//! ```toml
//! name = "my-sidecar"
//! command = ["/usr/local/bin/my-sidecar", "--quiet"]
//! capabilities = ["drain"]
//! args = ["--backend-type", "vllm"]         # fixed extra arguments
//! env = { PYTHONUNBUFFERED = "1" }          # fixed extra environment
//!
//! [settings]                                # unlisted settings keep our flag names
//! master_url = "--service-url"              # renamed flag
//! internal_token = { env = "XLLM_INTERNAL_TOKEN" }
//! log_format = false                        # not given at all
//! ```
//!
//! A profile is checked before anything starts, as a scenario file is: an unknown key,
//! setting or capability, two settings on one flag or variable, or a command that
//! cannot be found is an error naming the file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::capability::{self, Capabilities, Capability};
use crate::settings::{Setting, SidecarSettings};
use crate::sidecar::{locate_binary, Launch};

/// How one setting reaches the sidecar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// As this flag and its value.
    Flag(String),
    /// In this environment variable.
    Env(String),
    /// Not at all.
    Dropped,
}

/// What runs as each instance's sidecar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// Our `vllm-sidecar` (`--sidecar-bin`, `$VLLM_SIDECAR_BIN`, next to the runner, or
    /// built with cargo).
    OurBinary(Option<PathBuf>),
    /// A command line: the program and its first arguments.
    Command(Vec<String>),
}

/// A sidecar implementation as the harness runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// Its name in reports.
    pub name: String,
    /// What runs.
    pub program: Program,
    /// How each setting it names reaches the sidecar (the others: our flags).
    pub settings: BTreeMap<Setting, Mapping>,
    /// Fixed arguments after the command's own.
    pub args: Vec<String>,
    /// Fixed environment variables.
    pub env: Vec<(String, String)>,
    /// What it declares beyond the contract.
    pub capabilities: Capabilities,
}

impl Profile {
    /// The profile `--profile` or `--sidecar-cmd` names (`None`: neither, our sidecar).
    pub fn from_args(
        profile: &Option<String>,
        cmd: &Option<String>,
    ) -> Result<Option<Profile>, String> {
        match (profile, cmd) {
            (_, Some(line)) => Profile::from_command_line(line).map(Some),
            (Some(p), None) => Profile::load(p).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// A profile named `name` that runs `program` with our flags and nothing more,
    /// declaring no capability.
    fn new(name: &str, program: Program) -> Profile {
        Profile {
            name: name.to_string(),
            program,
            settings: BTreeMap::new(),
            args: Vec::new(),
            env: Vec::new(),
            capabilities: Capabilities::new(),
        }
    }

    /// Our `vllm-sidecar`, every capability: the default.
    pub fn ours(bin: Option<PathBuf>) -> Profile {
        Profile {
            capabilities: capability::all(),
            ..Profile::new("vllm-sidecar", Program::OurBinary(bin))
        }
    }

    /// The upstream Python reference sidecar (`python3 -m vllm_sidecar.sidecar`): our
    /// flags but `--log-format` and `--model`, which it does not take; no capability.
    pub fn reference_python() -> Profile {
        let settings = [Setting::LogFormat, Setting::Model]
            .into_iter()
            .map(|s| (s, Mapping::Dropped))
            .collect();
        let words = ["python3", "-m", "vllm_sidecar.sidecar"].map(String::from);
        Profile {
            settings,
            env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
            ..Profile::new("reference-python", Program::Command(words.to_vec()))
        }
    }

    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            "vllm-sidecar" => Some(Profile::ours(None)),
            "reference-python" => Some(Profile::reference_python()),
            _ => None,
        }
    }

    /// `--sidecar-cmd "<command line>"`: our flags, given to that command, and no
    /// capability declared (a profile file declares them).
    pub fn from_command_line(line: &str) -> Result<Profile, String> {
        let words = shlex::split(line)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| format!("--sidecar-cmd `{line}`: not a command line"))?;
        find_command(&words).map_err(|e| format!("--sidecar-cmd: {e}"))?;
        Ok(Profile::new("sidecar-cmd", Program::Command(words)))
    }

    /// Read a profile file (or a built-in profile's name).
    pub fn load(arg: &str) -> Result<Profile, String> {
        if let Some(p) = Profile::builtin(arg) {
            return Ok(p);
        }
        let text = std::fs::read_to_string(arg).map_err(|e| format!("{arg}: {e}"))?;
        Profile::parse(arg, &text)
    }

    /// Parse and check a profile file's text (`file` names it in errors).
    pub fn parse(file: &str, text: &str) -> Result<Profile, String> {
        let located = |line: Option<usize>, msg: String| match line {
            Some(l) => format!("{file}:{l}: {msg}"),
            None => format!("{file}: {msg}"),
        };
        let at = |key: &str, msg: String| located(line_of(text, key), msg);
        let raw: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e.span().map(|s| crate::spec::line_of(text, s.start));
            located(line, e.message().trim().replace('\n', "; "))
        })?;
        let mut p = Profile::new(file, Program::Command(Vec::new()));
        for (key, value) in &raw {
            match key.as_str() {
                "name" => p.name = string(value).ok_or_else(|| at(key, "`name` is a string".into()))?,
                "command" => p.program = Program::Command(strings(value).ok_or_else(|| {
                    at(key, "`command` is a list of strings: the program, then its arguments".into())
                })?),
                "args" => p.args = strings(value).ok_or_else(|| at(key, "`args` is a list of strings".into()))?,
                "env" => p.env = env_table(value).ok_or_else(|| at(key, "`env` is a table of strings".into()))?,
                "capabilities" => {
                    let names = strings(value).ok_or_else(|| at(key, "`capabilities` is a list of names".into()))?;
                    for n in names {
                        let c = Capability::parse(&n).ok_or_else(|| {
                            let known: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
                            at(&n, format!("unknown capability `{n}` (known: {})", known.join(", ")))
                        })?;
                        p.capabilities.insert(c);
                    }
                }
                "settings" => p.settings = settings_table(value, &at)?,
                other => {
                    return Err(at(other, format!(
                        "unknown key `{other}` (expected name, command, args, env, capabilities, settings)"
                    )))
                }
            }
        }
        if p.program == Program::Command(Vec::new()) {
            return Err(format!("{file}: `command` is missing"));
        }
        p.check_twice(&at)?;
        if let Program::Command(words) = &p.program {
            find_command(words).map_err(|e| at("command", e))?;
        }
        Ok(p)
    }

    /// Two settings on one flag or one variable (what the sidecar got would be one of
    /// them, whichever came last).
    fn check_twice(&self, at: &dyn Fn(&str, String) -> String) -> Result<(), String> {
        let mut seen: BTreeMap<String, Setting> = BTreeMap::new();
        for s in Setting::all() {
            let target = match self.mapping(s) {
                Mapping::Flag(f) => format!("flag {f}"),
                Mapping::Env(v) => format!("variable {v}"),
                Mapping::Dropped => continue,
            };
            if let Some(first) = seen.insert(target.clone(), s) {
                let (a, b) = (first.name(), s.name());
                let why = format!("settings `{a}` and `{b}` are both mapped to {target}");
                return Err(at(b, why));
            }
        }
        Ok(())
    }

    /// How `setting` reaches the sidecar.
    pub fn mapping(&self, setting: Setting) -> Mapping {
        let ours = || Mapping::Flag(setting.our_flag().to_string());
        self.settings.get(&setting).cloned().unwrap_or_else(ours)
    }

    /// The process to start for one sidecar with `settings`.
    pub fn launch(&self, settings: &SidecarSettings) -> Result<Launch, String> {
        let (program, mut args) = match &self.program {
            Program::OurBinary(Some(p)) => (p.clone(), Vec::new()),
            Program::OurBinary(None) => (locate_binary()?, Vec::new()),
            Program::Command(words) => find_command(words).map(|(p, rest)| (p, rest.to_vec()))?,
        };
        args.extend(self.args.iter().cloned());
        let mut env = self.env.clone();
        for (s, v) in &settings.values {
            match self.mapping(*s) {
                Mapping::Flag(f) => args.extend([f, v.clone()]),
                Mapping::Env(name) => env.push((name, v.clone())),
                Mapping::Dropped => {}
            }
        }
        args.extend(settings.extra_args());
        let given = |s: &Setting| settings.values.iter().any(|(g, _)| g == s);
        let unset = Setting::all()
            .filter(|s| !given(s))
            .filter_map(|s| match self.mapping(s) {
                Mapping::Env(name) => Some(name),
                _ => None,
            })
            .collect();
        Ok(Launch {
            program,
            args,
            env,
            unset,
        })
    }
}

fn string(v: &toml::Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn strings(v: &toml::Value) -> Option<Vec<String>> {
    v.as_array()?.iter().map(string).collect()
}

fn env_table(v: &toml::Value) -> Option<Vec<(String, String)>> {
    v.as_table()?
        .iter()
        .map(|(k, v)| Some((k.clone(), string(v)?)))
        .collect()
}

fn settings_table(
    v: &toml::Value,
    at: &dyn Fn(&str, String) -> String,
) -> Result<BTreeMap<Setting, Mapping>, String> {
    let not_table = "`settings` is a table: setting = \"--flag\"";
    let table = v
        .as_table()
        .ok_or_else(|| at("settings", not_table.into()))?;
    let mut out = BTreeMap::new();
    for (k, v) in table {
        let s = Setting::parse(k).ok_or_else(|| {
            let known: Vec<&str> = Setting::all().map(Setting::name).collect();
            let known = known.join(", ");
            at(k, format!("unknown setting `{k}` (known: {known})"))
        })?;
        // `{ env = "NAME" }`, and nothing else in the table.
        let env = v
            .as_table()
            .filter(|t| t.len() == 1)
            .and_then(|t| t.get("env")?.as_str());
        let m = match (v, env) {
            (_, Some(name)) => Mapping::Env(name.to_string()),
            (toml::Value::String(f), _) if f.starts_with('-') => Mapping::Flag(f.clone()),
            (toml::Value::Boolean(false), _) => Mapping::Dropped,
            _ => {
                let want = "a flag (\"--name\"), { env = \"NAME\" }, or false to drop it";
                return Err(at(k, format!("setting `{k}`: {want}")));
            }
        };
        out.insert(s, m);
    }
    Ok(out)
}

/// The line (1-based) where `key` is first written as a key or a quoted value.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.starts_with(&format!("{key} "))
                || t.starts_with(&format!("{key}="))
                || l.contains(&format!("\"{key}\""))
        })
        .map(|i| i + 1)
}

/// A command line's program, found, and the arguments after it.
fn find_command(words: &[String]) -> Result<(PathBuf, &[String]), String> {
    let (prog, rest) = words.split_first().ok_or("the command is empty")?;
    let found = find_program(prog).ok_or_else(|| format!("command `{prog}` not found"))?;
    Ok((found, rest))
}

/// `prog` as a path that exists, or found on `$PATH`.
fn find_program(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        let p = Path::new(prog);
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::SidecarSettings;

    fn settings() -> SidecarSettings {
        SidecarSettings {
            values: vec![
                (Setting::LeaseTtl, "3".into()),
                (Setting::MasterUrl, "http://m".into()),
                (Setting::LogFormat, "json".into()),
            ],
            extra: vec![("--x".into(), "1".into())],
        }
    }

    #[test]
    fn a_profile_renames_moves_and_drops_settings() {
        let text = "name = \"other\"\ncommand = [\"sh\", \"-c\", \"true\"]\nargs = [\"--fixed\"]\nenv = { A = \"1\" }\ncapabilities = [\"drain\"]\n[settings]\nlease_ttl = \"--ttl\"\nmaster_url = { env = \"MASTER\" }\ninternal_token = { env = \"TOKEN\" }\nlog_format = false\n";
        let p = Profile::parse("p.toml", text).unwrap();
        assert_eq!(p.name, "other");
        assert!(p.capabilities.contains(&Capability::Drain));
        let l = p.launch(&settings()).unwrap();
        assert!(l.program.ends_with("sh"), "{:?}", l.program);
        assert_eq!(l.args, ["-c", "true", "--fixed", "--ttl", "3", "--x", "1"]);
        assert_eq!(
            l.env,
            [
                ("A".to_string(), "1".to_string()),
                ("MASTER".into(), "http://m".into())
            ]
        );
        // A mapped variable whose setting is not given is unset, not inherited.
        assert_eq!(l.unset, ["TOKEN"]);
    }

    #[test]
    fn a_profile_is_checked_before_anything_runs() {
        let cases = [
            ("command = [\"sh\"]\ncolour = \"red\"\n", "p.toml:2: unknown key `colour`"),
            ("command = [\"sh\"]\ncapabilities = [\"flying\"]\n", "p.toml:2: unknown capability `flying`"),
            ("command = [\"sh\"]\n[settings]\nlease_tll = \"--ttl\"\n", "p.toml:3: unknown setting `lease_tll`"),
            (
                "command = [\"sh\"]\n[settings]\nlease_ttl = \"--ttl\"\nhealth_timeout = \"--ttl\"\n",
                "settings `lease_ttl` and `health_timeout` are both mapped to flag --ttl",
            ),
            ("command = [\"sh\"]\n[settings]\nlease_ttl = \"--lease-ttl\"\nhealth_timeout = \"--lease-ttl\"\n", "p.toml:4:"),
            ("name = \"x\"\n", "p.toml: `command` is missing"),
            ("command = [\"/no/such/sidecar\"]\n", "p.toml:1: command `/no/such/sidecar` not found"),
            ("command = [\"sh\"\n", "invalid array; expected `]`"),
        ];
        for (text, want) in cases {
            let e = Profile::parse("p.toml", text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn built_in_profiles_and_command_lines() {
        let r = Profile::builtin("reference-python").unwrap();
        assert_eq!(r.mapping(Setting::Model), Mapping::Dropped);
        assert_eq!(
            r.mapping(Setting::LeaseTtl),
            Mapping::Flag("--lease-ttl".into())
        );
        assert!(r.capabilities.is_empty());
        assert_eq!(Profile::ours(None).capabilities, capability::all());
        let p = Profile::from_command_line("sh -c 'exec true'").unwrap();
        assert_eq!(
            p.program,
            Program::Command(vec!["sh".into(), "-c".into(), "exec true".into()])
        );
        assert!(Profile::from_command_line("no-such-sidecar-here --x").is_err());
        assert!(Profile::from_command_line("sh 'unclosed").is_err());
    }
}
