#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: vgpuctl maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vgpuctl_apply
short_description: Plan or apply a vgpuctl inventory against vCenter (vGPU hosts and VMs)
version_added: "0.1.0"
description:
  - Brings the ESXi hosts and VMs of a vgpuctl inventory to what it declares (GPU modes, vGPU profiles, VMs),
    through the C(vgpuctl) command on the host the task runs on, usually C(localhost) of the execution
    environment.
  - In check mode it runs C(vgpuctl plan) and changes nothing. The result holds the plan document;
    C(changed) is true when the plan has changes. With C(--diff) the plan's text, exactly as C(vgpuctl plan)
    prints it, is the task's diff.
  - Otherwise it runs C(vgpuctl apply --yes). The result holds the apply document that
    C(vgpuctl --output json apply) prints; C(changed) is true when a host, a VM, a VM class or a namespace
    changed. With C(--diff) the plan is made first, shown as the diff, and applied exactly as shown
    (C(vgpuctl apply PLANFILE)); apply then stops when the farm changed between the two.
  - Apply does not ask. Every disruptive step the plan lists (hosts entering maintenance mode, host reboots,
    VMs powered off, VMs destroyed with O(allow_destroy)) is taken. Run the task with C(--check --diff) first
    to see them, or limit the run with O(hosts), O(clusters) and O(vms).
  - A failed run (a plan with errors, a host or VM that failed, a refused connection) is a failed task whose
    C(msg) is the error vgpuctl ends with; an apply that ran keeps its document in RV(report).
  - The module runs vgpuctl as a subprocess (C(vgpuctl --output json ...)) and reads its JSON documents and
    exit codes; it does not import vgpuctl. The Python that runs the module (the controller's, or a remote
    host's) then needs nothing but the C(vgpuctl) command, any vgpuctl installed beside it works, the
    module relies only on the command-line contract every other caller relies on, and a stuck vCenter call
    stays in a child process that ends with the task.
  - Passwords reach vgpuctl in its environment (E(VGPUCTL_PASSWORD), E(VGPUCTL_ESXI_PASSWORD)), never on its
    command line, so they are not in the process list; they are never in the result.
requirements:
  - vgpuctl on the host the task runs on (the execution environment of this collection carries it)
options:
  src:
    description:
      - Path of the inventory file (C(apiVersion vgpuctl/v1)) on the host the task runs on.
      - Relative paths in the inventory resolve against the file's folder, as for C(vgpuctl apply -f).
      - Exactly one of O(src) and O(content) is required.
    type: path
  content:
    description:
      - The inventory itself, as a dictionary or as YAML text.
      - It is written to a file in the module's temporary folder for the run, so paths in it must be
        absolute. Errors name that file; their key path (for example C(vms[0].vgpus.count)) is in
        RV(error.details).
    type: raw
  env:
    description:
      - The overlay of the inventory's C(overlays) section to apply (C(--env)), for example C(prod).
    type: str
  values:
    description:
      - Values files merged over the inventory in the order given (C(--values), repeated), after O(env).
      - Relative paths resolve against the task's working folder; with O(content), give absolute paths.
    type: list
    elements: path
    default: []
  executable:
    description:
      - Path of the C(vgpuctl) command.
      - By default C(vgpuctl) is looked for beside the Python that runs the module (a virtual environment's
        C(bin) folder), then on E(PATH).
    type: path
  url:
    description:
      - vCenter URL (C(https://host/sdk) or C(host[:port])).
      - When not given, vgpuctl reads E(VGPUCTL_URL), then E(GOVC_URL), from the environment, then the
        inventory's C(vcenter.url).
      - A password in the URL is refused; use O(password).
    type: str
  username:
    description:
      - vCenter user name.
      - When not given, vgpuctl reads E(VGPUCTL_USERNAME), then E(GOVC_USERNAME).
    type: str
  password:
    description:
      - vCenter password, handed to vgpuctl in its environment.
      - When neither O(password) nor O(password_file) is given, vgpuctl reads E(VGPUCTL_PASSWORD), then
        E(GOVC_PASSWORD), from the environment the module runs in (as AWX credentials inject them). Do not
        set those with the task's C(environment) keyword; its values are part of the command Ansible runs.
    type: str
  password_file:
    description:
      - File whose first line is the vCenter password (C(vgpuctl --password-file)).
    type: path
  validate_certs:
    description:
      - V(false) does not verify vCenter's TLS certificate (C(--insecure), warned about); V(true) verifies it
        even where E(VGPUCTL_INSECURE) or the inventory turn verification off (C(--no-insecure)).
      - When not given, vgpuctl decides from E(VGPUCTL_INSECURE) (E(GOVC_INSECURE)) and the inventory's
        C(vcenter.tls); it verifies by default.
    type: bool
  ca_file:
    description:
      - CA bundle to verify vCenter's certificate with (C(--ca-file); else E(VGPUCTL_CA_FILE),
        E(GOVC_TLS_CA_CERTS)).
    type: path
  thumbprint:
    description:
      - Pin vCenter's certificate by its SHA-256 thumbprint (C(--thumbprint); else E(VGPUCTL_THUMBPRINT)).
    type: str
  datacenter:
    description:
      - Datacenter (C(--datacenter); default the inventory's C(vcenter.datacenter)).
    type: str
  timeout:
    description:
      - Seconds to wait for vCenter to connect and to answer each request, and for each ESXi shell command
        (C(--timeout); else E(VGPUCTL_TIMEOUT)).
    type: float
  lock_timeout:
    description:
      - How long to wait for a host or VM that another vgpuctl run is changing (C(90s), C(5m), C(1h30m);
        C(--lock-timeout)) instead of failing it at once.
    type: str
  hosts:
    description:
      - Only these hosts (names, short names or globs) and the inventory's VMs on them (C(--host)).
      - With O(clusters) and O(vms), the run plans and applies only these entries and what they need;
        everything else is listed as out of scope in the plan and left untouched.
    type: list
    elements: str
    default: []
  clusters:
    description:
      - Only these clusters (names or globs), their hosts' changes and the inventory's VMs in them
        (C(--cluster)).
    type: list
    elements: str
    default: []
  vms:
    description:
      - Only these VMs of the inventory (names or globs; C(--vm)). Host changes a VM in scope waits for are
        pulled in.
    type: list
    elements: str
    default: []
  parallel:
    description:
      - VMs changed at the same time (C(--parallel), 1 to 64; vgpuctl's default when not given).
    type: int
  keep_going:
    description:
      - When a host change fails, go on with the other hosts (C(--keep-going)).
    type: bool
    default: false
  allow_destroy:
    description:
      - "Destroy the VMs whose inventory entries say C(state: absent) (C(--allow-destroy)). Without it, or
        C(allow_destroy: true) in the inventory, apply of such a plan changes nothing and fails."
    type: bool
    default: false
  esxi_user:
    description:
      - User of the ESXi shell (SSH) for host GPU changes (E(VGPUCTL_ESXI_USER)); an inventory host's C(ssh)
        section wins.
    type: str
  esxi_password:
    description:
      - Password of the ESXi shell, handed to vgpuctl in its environment (E(VGPUCTL_ESXI_PASSWORD)).
    type: str
  esxi_key_file:
    description:
      - Private key for the ESXi shell (E(VGPUCTL_ESXI_KEY_FILE)); an inventory host's C(ssh) section wins.
    type: path
  esxi_known_hosts:
    description:
      - known_hosts file the ESXi host keys are verified against (E(VGPUCTL_ESXI_KNOWN_HOSTS)); unknown keys
        are refused.
    type: path
attributes:
  check_mode:
    support: full
    description: Runs C(vgpuctl plan); nothing changes.
  diff_mode:
    support: full
    description: The plan's text as C(prepared).
notes:
  - "Run it where vgpuctl is installed, usually C(hosts: localhost) with C(connection: local) or
    C(delegate_to: localhost)."
  - Scope options are not applied when the plan is saved and applied with C(--diff); the saved plan keeps
    the scope it was made with, which is the same.
seealso:
  - name: vgpuctl README
    description: The inventory, plan and apply, and the JSON documents (docs/schemas in the repository).
    link: https://github.com/vgpuctl/vgpuctl
author:
  - vgpuctl maintainers
"""

EXAMPLES = r"""
- name: Show what would change (run with --check --diff)
  vgpuctl.guest.vgpuctl_apply:
    src: /srv/vgpuctl/inventory.yaml
  check_mode: true
  register: planned

- name: Apply the inventory to one cluster, vCenter from the task's options
  vgpuctl.guest.vgpuctl_apply:
    src: /srv/vgpuctl/inventory.yaml
    clusters: [GPU-Cluster]
    url: https://vc.example.com/sdk
    username: automation@vsphere.local
    password: "{{ vcenter_password }}"
    ca_file: /etc/pki/vcenter-ca.pem
    parallel: 8
  register: applied

- name: An inline inventory; vCenter from VGPUCTL_URL, VGPUCTL_USERNAME and VGPUCTL_PASSWORD in the environment
  vgpuctl.guest.vgpuctl_apply:
    content:
      apiVersion: vgpuctl/v1
      vcenter: {datacenter: DC0}
      vms:
        - name: train-01
          template: ubuntu-22.04-ml
          cluster: GPU-Cluster
          vgpus: {profile: grid_a100-40c, count: 2}

- name: Say which VMs changed
  ansible.builtin.debug:
    msg: "{{ applied.report.changed }}"
"""

RETURN = r"""
plan:
  description:
    - The plan document (C(vgpuctl --output json plan), schema C(docs/schemas/plan.schema.json)) - host and
      VM changes, disruptive steps, warnings and counts.
  returned: in check mode, when the plan had no errors
  type: dict
  sample:
    kind: plan
    host_changes: []
    vm_changes:
      - vm: train-01
        steps: [clone, reconfigure, power-on]
    disruptions: []
    errors: []
    warnings: []
    summary: {create: 1, change: 0, power_off: 0, power_on: 1, host_changes: 0, maintenance: 0, reboots: 0,
              errors: 0, warnings: 0, vm_classes: 0, namespaces: 0, remove: 0}
report:
  description:
    - The apply document (C(vgpuctl --output json apply), schema C(docs/schemas/apply.schema.json)) - the
      plan it applied, each host and VM with its status and steps, the VM names by outcome (C(changed),
      C(failed), C(skipped), C(unchanged), C(not_started)), each VM-class and namespace change, and, when the
      run failed, its C(error).
    - Under its own key, because the document's C(changed) (the VMs changed) is not Ansible's C(changed).
  returned: when not in check mode and the apply ran (also when it failed)
  type: dict
  sample:
    kind: apply
    hosts: []
    vms:
      - {vm: train-01, status: changed, steps: [clone, reconfigure, power-on], fault_type: null, message: "",
         left: []}
    changed: [train-01]
    failed: []
    unchanged: []
error:
  description:
    - What failed the run - C(type) (vgpuctl's error class), C(message) (also in C(msg)) and C(details),
      one per problem; an inventory problem has C(file), C(line), C(col) and C(path) (its key path).
  returned: failure
  type: dict
  sample:
    type: PlanError
    message: "vm train-09: cannot power on: no host of cluster GPU-Cluster has GPU capacity"
    details:
      - message: "vm train-09: cannot power on: no host of cluster GPU-Cluster has GPU capacity"
diff:
  description: The plan's text as C(prepared), as C(vgpuctl plan) prints it.
  returned: with --diff
  type: dict
  sample:
    prepared: "+ vm train-01  (clone from ubuntu-22.04-ml -> reconfigure -> power on)\n..."
"""

import json
import os
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.six.moves.urllib.parse import unquote

ARGUMENT_SPEC = dict(
    src=dict(type="path"),
    content=dict(type="raw"),
    env=dict(type="str"),
    values=dict(type="list", elements="path", default=[]),
    executable=dict(type="path"),
    url=dict(type="str"),
    username=dict(type="str"),
    password=dict(type="str", no_log=True),
    password_file=dict(type="path", no_log=False),
    validate_certs=dict(type="bool"),
    ca_file=dict(type="path"),
    thumbprint=dict(type="str"),
    datacenter=dict(type="str"),
    timeout=dict(type="float"),
    lock_timeout=dict(type="str"),
    hosts=dict(type="list", elements="str", default=[]),
    clusters=dict(type="list", elements="str", default=[]),
    vms=dict(type="list", elements="str", default=[]),
    parallel=dict(type="int"),
    keep_going=dict(type="bool", default=False),
    allow_destroy=dict(type="bool", default=False),
    esxi_user=dict(type="str"),
    esxi_password=dict(type="str", no_log=True),
    esxi_key_file=dict(type="path", no_log=False),
    esxi_known_hosts=dict(type="path"),
)
MUTUALLY_EXCLUSIVE = [("src", "content"), ("password", "password_file")]
REQUIRED_ONE_OF = [("src", "content")]

# Options given to vgpuctl as global flags (nothing secret: these may show in the process list).
GLOBAL_FLAGS = (
    ("url", "--url"),
    ("username", "--username"),
    ("password_file", "--password-file"),
    ("ca_file", "--ca-file"),
    ("thumbprint", "--thumbprint"),
    ("datacenter", "--datacenter"),
    ("timeout", "--timeout"),
    ("lock_timeout", "--lock-timeout"),
)
# Options handed over in vgpuctl's environment: secrets, and the ESXi shell settings that have no flag.
ENVIRONMENT = (
    ("password", "VGPUCTL_PASSWORD"),
    ("esxi_user", "VGPUCTL_ESXI_USER"),
    ("esxi_password", "VGPUCTL_ESXI_PASSWORD"),
    ("esxi_key_file", "VGPUCTL_ESXI_KEY_FILE"),
    ("esxi_known_hosts", "VGPUCTL_ESXI_KNOWN_HOSTS"),
)
SCOPE_FLAGS = (("hosts", "--host"), ("clusters", "--cluster"), ("vms", "--vm"))
EXIT_CHANGES_PENDING = 2  # `vgpuctl plan --detailed-exitcode`: the plan has changes


def url_password(url):
    """The password of a URL's user info (`https://user:password@vc/sdk`), or None."""
    authority = url.split("://", 1)[-1].split("/", 1)[0]
    if "@" not in authority:
        return None
    userinfo = authority.rsplit("@", 1)[0]
    return userinfo.split(":", 1)[1] if ":" in userinfo else None


def refuse_url_password(module):
    """A password in `url` would be on vgpuctl's command line: masked in the result, and refused."""
    password = url_password(module.params["url"] or "")
    if password:
        module.no_log_values.update({password, unquote(password)})
        module.fail_json(msg="url: do not put a password in the URL; use the password option")


def global_args(params):
    args = ["--output", "json"]
    for name, flag in GLOBAL_FLAGS:
        if params[name] is not None:
            args += [flag, str(params[name])]
    if params["validate_certs"] is not None:
        args.append("--no-insecure" if params["validate_certs"] else "--insecure")
    return args


def child_environment(params):
    return {var: params[name] for name, var in ENVIRONMENT if params[name] is not None}


def scope_args(params):
    """The scope and the inventory's composition (`--env`, `--values`): what `plan -f` and `apply -f` take."""
    args = [arg for name, flag in SCOPE_FLAGS for value in params[name] for arg in (flag, value)]
    if params["env"] is not None:
        args += ["--env", params["env"]]
    return args + [arg for path in params["values"] for arg in ("--values", path)]


def apply_args(params):
    args = ["--yes"]
    if params["parallel"] is not None:
        args += ["--parallel", str(params["parallel"])]
    if params["keep_going"]:
        args.append("--keep-going")
    if params["allow_destroy"]:
        args.append("--allow-destroy")
    return args


def inventory_path(module):
    """`src`, or `content` written into the module's temporary folder (a dictionary as JSON, which is YAML)."""
    if module.params["src"] is not None:
        return module.params["src"]
    content = module.params["content"]
    if isinstance(content, dict):
        text = json.dumps(content, indent=2)
    elif isinstance(content, str):
        text = content
    else:
        module.fail_json(msg="content: give the inventory as a dictionary or as YAML text")
    path = os.path.join(module.tmpdir, "inventory.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def find_vgpuctl(module):
    if module.params["executable"] is not None:
        return module.params["executable"]
    return module.get_bin_path("vgpuctl", required=True, opt_dirs=[os.path.dirname(sys.executable)])


class Vgpuctl:
    """The vgpuctl command with the task's connection settings."""

    def __init__(self, module):
        self.module = module
        self.executable = find_vgpuctl(module)
        self.global_args = global_args(module.params)
        self.environment = child_environment(module.params)

    def run(self, args):
        """Run a command with --output json: (exit status, its JSON document or None, stderr)."""
        rc, out, err = self.module.run_command([self.executable, *self.global_args, *args], check_rc=False,
                                               environ_update=self.environment, expand_user_and_vars=False)
        try:
            document = json.loads(out) if out.strip() else None
        except ValueError:
            document = None
        return rc, document if isinstance(document, dict) else None, err

    def show(self, plan_file):
        """The saved plan's text, as `vgpuctl plan` printed it."""
        rc, out, err = self.module.run_command([self.executable, "--output", "text", "show", plan_file],
                                               check_rc=False, expand_user_and_vars=False)
        if rc != 0:
            self.module.fail_json(msg="vgpuctl show failed: " + last_line(err), rc=rc)
        return out

    def fail(self, rc, document, stderr, **result):
        """A failed task: vgpuctl's error as msg, its error document (or the failed apply's) in the result."""
        error = (document or {}).get("error")
        if isinstance(error, dict):
            self.module.fail_json(msg=error_message(error), error=error, rc=rc, **result)
        self.module.fail_json(msg=f"vgpuctl printed no JSON document (exit status {rc}): {last_line(stderr)}",
                              rc=rc, stderr_lines=stderr.splitlines()[-20:], **result)


def error_message(error):
    """The task's msg: vgpuctl's error; for a plan refused for its problems, the problems themselves (the task
    does not show the plan they were printed with)."""
    details = [d.get("message") for d in error.get("details") or [] if isinstance(d, dict) and d.get("message")]
    if error.get("type") == "PlanRefused" and details:
        return "; ".join(details)
    return error.get("message") or error.get("type")


def last_line(text):
    lines = [line for line in to_native(text).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def warn_plan_warnings(module, plan):
    for warning in (plan or {}).get("warnings") or []:
        module.warn(f"vgpuctl plan: {warning}")


def make_plan(module, vgpuctl, inventory, plan_file=None):
    """`vgpuctl plan`: (the plan document, whether it has changes); a plan with errors fails the task."""
    args = ["plan", "-f", inventory, "--detailed-exitcode", *scope_args(module.params)]
    if plan_file is not None:
        args += ["--out", plan_file]
    rc, document, stderr = vgpuctl.run(args)
    if rc not in (0, EXIT_CHANGES_PENDING) or document is None or document.get("kind") != "plan":
        vgpuctl.fail(rc, document, stderr, changed=False)
    warn_plan_warnings(module, document)
    return document, rc == EXIT_CHANGES_PENDING


def apply_changed(report):
    """Whether anything changed: a host, a VM, a VM class or a namespace whose outcome is `changed`."""
    outcomes = (report.get("hosts") or []) + (report.get("vms") or []) + (report.get("vm_class_outcomes") or [])
    return any(o.get("status") == "changed" for o in outcomes)


def check(module, vgpuctl, inventory):
    plan_file = os.path.join(module.tmpdir, "vgpuctl.plan") if module._diff else None
    plan, changed = make_plan(module, vgpuctl, inventory, plan_file)
    result = dict(changed=changed, plan=plan)
    if plan_file is not None:
        result["diff"] = dict(prepared=vgpuctl.show(plan_file))
    module.exit_json(**result)


def apply(module, vgpuctl, inventory):
    result = {}
    if module._diff:  # plan, show, and apply exactly the plan shown
        plan_file = os.path.join(module.tmpdir, "vgpuctl.plan")
        make_plan(module, vgpuctl, inventory, plan_file)
        result["diff"] = dict(prepared=vgpuctl.show(plan_file))
        args = ["apply", plan_file, *apply_args(module.params)]
    else:
        args = ["apply", "-f", inventory, *apply_args(module.params), *scope_args(module.params)]
    rc, report, stderr = vgpuctl.run(args)
    if report is not None and report.get("kind") == "apply":
        result.update(changed=apply_changed(report), report=report)
        if not module._diff:
            warn_plan_warnings(module, report.get("plan"))
    if rc != 0:
        vgpuctl.fail(rc, report, stderr, **result)
    if "report" not in result:
        vgpuctl.fail(rc, report, stderr)
    module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                           required_one_of=REQUIRED_ONE_OF, supports_check_mode=True)
    refuse_url_password(module)
    if module.params["validate_certs"] is False:
        module.warn("validate_certs is false: the identity of vCenter is not checked")
    vgpuctl = Vgpuctl(module)
    inventory = inventory_path(module)
    if module.check_mode:
        check(module, vgpuctl, inventory)
    else:
        apply(module, vgpuctl, inventory)


if __name__ == "__main__":
    main()
