"""`vgpuctl k8s`: VM classes with vGPUs and supervisor namespaces (plan, apply), and manifests (render).

plan/apply read the hosts over SOAP (which profiles each supervisor cluster's hosts offer) and the VM
classes and namespaces over the Automation REST API, each with one login for the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.domain import ClusterKind
from vgpuctl.errors import OutputError, PlanError, UsageError, VgpuctlError
from vgpuctl.outpaths import inside, refuse_overlaps, write_whole

if TYPE_CHECKING:
    from rich.text import Text

    from vgpuctl.inventory import Inventory
    from vgpuctl.model import HostChange, Observed, SupervisorApplyResult
    from vgpuctl.supervisor.render import RenderOptions
    from vgpuctl.supervisor.stage import SupervisorRun
    from vgpuctl.supervisor.vmclasses import SupervisorPlan

EXIT_CHANGES_PENDING = 2

app = typer.Typer(
    help="VM classes with vGPUs and supervisor namespaces (vSphere with Kubernetes).", no_args_is_help=True
)

InventoryFile = Annotated[
    Path, typer.Option("--file", "-f", help="Inventory file (apiVersion vgpuctl/v1).", dir_okay=False)
]


def load(opts: GlobalOptions, path: Path) -> Inventory:
    """The inventory with its schema, semantic and VM-class checks done (errors as FILE:LINE:COL)."""
    return common.load_inventory(opts, path)


def planned_host_changes(inventory: Inventory, observed: Observed) -> list[HostChange]:
    """The inventory's host changes as planned from the API alone (GPU modes), for the offered-profile check;
    `vgpuctl plan` plans them with the ESXi shell's facts and reports their problems."""
    from vgpuctl.hosts import plan as hostplan

    if not inventory.hosts:
        return []
    try:
        return list(hostplan.plan_hosts(inventory.hosts, observed, None, []).changes)
    except VgpuctlError:
        return []


def _plan(opts: GlobalOptions, inventory: Inventory, run: SupervisorRun) -> SupervisorPlan:
    from vgpuctl import pipeline
    from vgpuctl.vsphere.session import open_session

    with open_session(run.rest.settings) as session:  # the REST client's settings: one warning, one prompt
        observed = pipeline.observe(session, common.datacenter_for(opts, inventory))
    return run.plan(observed, planned_host_changes(inventory, observed))


def _run(opts: GlobalOptions, inventory: Inventory) -> SupervisorRun:
    from vgpuctl.supervisor.stage import SupervisorRun

    return SupervisorRun(common.connection_settings(opts, inventory), inventory)


def plan_text(plan: SupervisorPlan) -> Text:
    """The VM-class diff, colored."""
    from vgpuctl.reports.supervisor import supervisor_plan_report

    return supervisor_plan_report(plan).render_text()


@app.command("plan")
def plan_cmd(
    ctx: typer.Context,
    file: InventoryFile,
    detailed_exitcode: Annotated[
        bool, typer.Option("--detailed-exitcode", help="Exit 0 when nothing changes, 2 when changes are pending.")
    ] = False,
) -> None:
    """Show the VM class and namespace changes apply would make."""
    from vgpuctl.reports.supervisor import supervisor_plan_report

    opts: GlobalOptions = ctx.obj
    inventory = load(opts, file)
    with _run(opts, inventory) as run:
        plan = _plan(opts, inventory, run)
    if plan.errors and not (opts.json or opts.verbose):
        raise PlanError(list(plan.errors))
    common.emit(supervisor_plan_report(plan), opts)
    if plan.errors:
        raise PlanError(list(plan.errors))
    if detailed_exitcode and not plan.is_empty:
        raise typer.Exit(EXIT_CHANGES_PENDING)


@app.command("apply")
def apply_cmd(
    ctx: typer.Context,
    file: InventoryFile,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Plan, confirm (unless --yes), then change one VM class or namespace at a time."""
    opts: GlobalOptions = ctx.obj
    inventory = load(opts, file)
    with _run(opts, inventory) as run:
        plan = _plan(opts, inventory, run)
        if plan.errors:
            raise PlanError(list(plan.errors))
        if opts.json:
            common.stderr_console().print(plan_text(plan))
        else:
            common.show(plan_text(plan))
        result = None
        if not plan.is_empty:
            if not yes:
                _confirm(plan)
            result = run.apply(progress=lambda what, step: common.info(f"{what}: {step}"))
    _finish(plan, result, opts)


def _confirm(plan: SupervisorPlan) -> None:
    common.confirm(f"Apply {len(plan.class_changes) + len(plan.namespace_changes)} change(s)?")


def _finish(plan: SupervisorPlan, result: SupervisorApplyResult | None, opts: GlobalOptions) -> None:
    from vgpuctl.reports.supervisor import SupervisorApplyReport, supervisor_outcomes, supervisor_plan_report

    outcomes = supervisor_outcomes(result) if result is not None else None
    common.emit(SupervisorApplyReport(supervisor_plan_report(plan), outcomes), opts)
    if result is not None and result.failed:
        failed = result.failed[0]
        raise VgpuctlError(f"apply stopped at {failed.target}: {failed.message}")


@app.command("status")
def status_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Take vCenter settings from this inventory.", dir_okay=False)
    ] = None,
) -> None:
    """VM classes with vGPUs, the namespaces that may use them, and the supervisor clusters (REST only)."""
    from vgpuctl.model import Observed
    from vgpuctl.reports.supervisor import supervisor_status_report
    from vgpuctl.supervisor.stage import observe_supervisor
    from vgpuctl.vsphere.rest import RestClient

    opts: GlobalOptions = ctx.obj
    inventory = common.maybe_inventory(opts, file)
    with RestClient(common.connection_settings(opts, inventory)) as rest:
        state = observe_supervisor(rest, Observed())
    common.emit(supervisor_status_report(state), opts)


ManifestFolder = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Write every file into this folder: the Kubernetes objects, the GPU Operator values, gridd.conf and "
        "the licensing script. Default: only the Kubernetes objects, as one YAML stream on stdout.",
        file_okay=False,
    ),
]


ClusterKindOpt = Annotated[
    ClusterKind | None,
    typer.Option("--cluster-kind",
                 help="The cluster object to write: cluster (Cluster API Cluster) or tkc (TanzuKubernetesCluster). "
                 "Default: the one the namespace's supervisor takes, asked over vCenter's REST API (TKG Service 3.1 "
                 "and later: cluster; older: tkc)."),
]


@app.command("render")
def render_cmd(
    ctx: typer.Context,
    file: InventoryFile,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Supervisor namespace of the inventory.")],
    out: ManifestFolder = None,
    cluster_name: Annotated[str, typer.Option(help="Name of the Kubernetes cluster.")] = "gpu-cluster",
    image: Annotated[str, typer.Option(help="VirtualMachineImage for VM Service VMs.")] = "ubuntu-2204-efi",
    storage_class: Annotated[str, typer.Option(help="Storage class of the namespace.")] = "vsan-default-storage-policy",
    k8s_version: Annotated[
        str, typer.Option(help="Kubernetes release (Cluster topology version and TKR).")
    ] = "v1.30.1---vmware.1-fips-tkg.5",
    replicas: Annotated[int, typer.Option(min=0, help="Workers per GPU VM class.")] = 1,
    registry: Annotated[
        str, typer.Option(help="Private registry of the vGPU guest driver image.")
    ] = "registry.example.com/nvidia",
    driver_version: Annotated[str, typer.Option(help="vGPU guest driver version (image tag).")] = "550.90.07",
    nls_token_file: Annotated[
        Path,
        typer.Option(
            help="NLS client configuration token file (its path goes into the script, never its content).",
            dir_okay=False,
        ),
    ] = Path("client_configuration_token.tok"),
    gpu_operator_version: Annotated[
        str,
        typer.Option(help="NVIDIA GPU Operator release the values are for: v25.10.0 and later take the licence "
                     "as a Secret (secretName), older ones as a config map (configMapName)."),
    ] = "v25.10.0",
    cluster_kind: ClusterKindOpt = None,
) -> None:
    """Kubernetes manifests for the namespace's GPU VM classes: VM Service VMs, one cluster object (a Cluster API
    Cluster or a TanzuKubernetesCluster, the kind the supervisor takes) and NVIDIA GPU Operator values. Needs a
    vCenter only to ask the supervisor, without --cluster-kind.

    Without --out, stdout is a YAML stream of the Kubernetes objects only (for `kubectl apply -f -`).

    Examples:
      vgpuctl k8s render -f inventory.yaml -n ml-team | kubectl apply -f -
      vgpuctl k8s render -f inventory.yaml -n ml-team --out manifests/
      vgpuctl k8s render -f inventory.yaml -n ml-team --cluster-kind tkc
    """
    from vgpuctl.reports.supervisor import manifests_report
    from vgpuctl.supervisor.render import RenderOptions, render_manifests

    opts: GlobalOptions = ctx.obj
    inventory = load(opts, file)
    options = RenderOptions(cluster_name=cluster_name, image=image, storage_class=storage_class,
                            k8s_version=k8s_version, tkr=k8s_version, replicas=replicas, registry=registry,
                            driver_version=driver_version, token_file=str(nls_token_file),
                            operator_version=gpu_operator_version)
    options.cluster_kind = _cluster_kind(opts, inventory, namespace, cluster_kind, options)
    manifests = render_manifests(inventory, namespace, options)
    if out is not None:
        write_manifests(out, manifests, common.inventory_inputs(opts, file, inventory))
    report = manifests_report(namespace, manifests, out, options.cluster_kind)
    if report.not_printed:
        common.info(f"not printed (Kubernetes objects only on stdout): {', '.join(report.not_printed)}; "
                    "write them with --out DIR")
    common.emit(report, opts)


def _cluster_kind(opts: GlobalOptions, inventory: Inventory, namespace: str, given: ClusterKind | None,
                  options: RenderOptions) -> ClusterKind:
    """--cluster-kind, else what the namespace's supervisor runs (its Supervisor Services, over REST), asked
    only once the options and the namespace's classes are known to render."""
    from vgpuctl.supervisor.render import check_options, gpu_classes, kind_for_supervisor

    if given is not None:
        return given
    check_options(options)
    gpu_classes(inventory, namespace)
    vcenter = getattr(inventory, "vcenter", None)
    if not (opts.url or getattr(vcenter, "url", None)):
        raise UsageError("which cluster object does the supervisor take? --cluster-kind cluster (Cluster API, TKG "
                         "Service 3.1 and later) or --cluster-kind tkc (TanzuKubernetesCluster); or give a vCenter "
                         "(--url) to ask it")
    from vgpuctl.vsphere.rest import RestClient

    with RestClient(common.connection_settings(opts, inventory)) as rest:
        services = rest.supervisor_services(rest.get_namespace(namespace).cluster)
    kind, why = kind_for_supervisor(services)
    common.info(f"cluster object: {kind.object_kind} ({why}; --cluster-kind to choose)")
    return kind


def write_manifests(out: Path, manifests: dict[str, str], inputs: dict[str, Path | None]) -> None:
    """One file per manifest in `out`, each written whole and checked to stay inside it and to name none of the
    `inputs` (all checked before the first is written); the licensing script executable."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"--out {out}: {err.strerror or err}") from None
    paths = {name: inside(out, name) for name in manifests}
    for path in paths.values():
        refuse_overlaps({"--out": path}, inputs)
    for name, text in manifests.items():
        write_whole(paths[name], text, "--out", mode=0o755 if name.endswith(".sh") else None)


def register(main_app: typer.Typer) -> None:
    main_app.add_typer(app, name="k8s")
