"""Everything the selection lane does with vLLM, for one simulated GPU in one process:
imported once, checkpoints written once, distributed state initialised once, reused by every
cell. Imported by the lane only once the simulated platform is installed."""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.attention import audit, draft_options, kv_cache, provenance
from harness.attention.apis import ApiUnavailable, unregistered_draft, vllm_apis
from harness.attention.checkpoint import write_draft, write_target
from harness.attention.draft import engine_config
from harness.attention.kv_cache import KvCacheLayout
from harness.attention.rejections import (
    MLA_REFUSED,
    NO_CPU_KERNEL,
    NO_DRIVER,
    NO_VALID_BACKEND,
    SELECTED,
    StartupStop,
    host_limit,
    rejection_reasons,
    startup_stop,
)
from harness.cell_process import freeze_process_state
from harness.contracts.lanes import SELECTION, SelectionOptions
from harness.cuda.simulated import SimulatedGpu, allow_host_flashinfer_impl, install
from harness.deployment.cells import selection_deployment
from harness.deployment.draft_options import DRAFT_OPTIONS, NO_OPTION
from harness.deployment.models import DRAFT_MODELS, SELECTION_SHAPE, DraftSpec, DraftTruth, ModelShape, draft_family
from harness.deployment.settings import draft_shape, draft_spec
from harness.lanes.selection.census import census, not_in_matrix
from harness.matrix import Cell
from harness.observation import HOST_LIMIT, Claim, Failure, Observation, one_line
from harness.stages import Stage, StageLog


class ConfigCheckpoints:
    """Config-only checkpoints (``write_draft(weights=False)``): the lane builds its drafts
    with ``load_format="dummy"``, so no weights are read. Written once per cell process."""

    def __init__(self, root: Path, head_dim: int):
        self.root = root
        self.shape = dataclasses.replace(SELECTION_SHAPE, head_dim=head_dim)
        self.target = write_target(root, self.shape, weights=False)
        self._targets: dict[str, Path] = {"qwen3-bfloat16-qwen3": self.target}
        self._drafts: dict[tuple[DraftSpec, ModelShape], DraftTruth] = {}

    def target_of(self, family: str, dtype: str = "bfloat16", head: str = "qwen3") -> Path:
        """The config-only target of a family, dtype and attention geometry (harness.axes
        TARGET_MODELS, TARGET_DTYPES, TARGET_HEADS), written on first use."""
        key = "-".join((family, dtype, head))
        if key not in self._targets:
            self._targets[key] = write_target(
                self.root, self.shape, weights=False, family=family, dtype=dtype, head=head
            )
        return self._targets[key]

    def draft(self, spec: DraftSpec, shape: ModelShape) -> DraftTruth:
        """The config-only draft of ``spec`` with dimensions ``shape`` (``settings.draft_shape``)."""
        if (spec, shape) not in self._drafts:
            self._drafts[spec, shape] = write_draft(self.root, spec, shape, weights=False)
        return self._drafts[spec, shape]


@dataclass(frozen=True)
class BuiltDraft:
    """The attention layers of a draft vLLM built: names, backends, impls and audited settings;
    and the KV cache vLLM lays out for target and draft layers together, or why this release
    cannot be asked (``kv_cache_missing``)."""

    names: tuple[str, ...]
    backends: tuple[str, ...]
    impls: tuple[str, ...]
    settings: tuple[dict[str, Any], ...]
    kv_cache: KvCacheLayout | None
    kv_cache_missing: str | None = None
    # What the engine's start-up did with these layers where it did not lay the cache out.
    startup: StartupStop | None = None
    # Whether the cell's draft_option reached the draft (harness.attention.draft_options).
    option: draft_options.OptionCheck | None = None
    # Every other attribute and config field against what the draft asked (issue 38).
    provenance: provenance.Judgement | None = None
    # The model class vLLM built for the draft's architecture (type(model).__name__), and the one
    # its registry maps that architecture to (harness.deployment.models.DRAFT_MODELS): issue 38's
    # other classes share loaders and configs with the three families, so a loader (or a config
    # rewrite) that builds another family's class must not pass as the class the checkpoint names.
    model_class: str = ""
    asked_class: str = ""


class _V1Refusal(Exception):
    """Model Runner V1 refuses this draft config (dspark, DFlash2 candidate heads, ...)."""


class _OptionRefused(Exception):
    """vLLM's config refuses the cell's draft_option (a validator naming the option's field): the
    engine never starts, vLLM's answer to the option, which the message carries."""


class _TargetNotBuilt(Exception):
    """The target itself failed to build under the cell's config (``__cause__`` is vLLM's error):
    the engine stops there, before any draft layer exists, so it is never read as the draft's."""


def _failure(stage: Stage, error: BaseException) -> Failure:
    return Failure.of(stage, error, limit=600)


@dataclass
class Selection:
    """What the platform answered for one draft layer's selector inputs."""

    claim: Claim | None = None
    explicit: str | None = None  # backend name the explicit request resolves to
    rejection: tuple[str, ...] | None = None
    auto: str | None = None
    auto_rejection: tuple[str, ...] | None = None
    # The FlashAttention version the platform gives a layer with the draft's own settings, under a
    # config that forces none (the audit's flash_attn_version); None where the release has no
    # get_flash_attn_version.
    flash_attn_version: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Asked:
    """One cell as the lane asks it: the request, the loader, and the details every observation
    of it carries (filled in as the steps of ``ProcessState.observe`` learn more)."""

    requested: str | None
    loader: str
    details: dict[str, Any]

    def unavailable(self, why: str) -> Observation:
        return Observation(requested_backend=self.requested, unavailable=why, details=self.details)


@dataclass(frozen=True)
class _Answered:
    """The platform's answer for the draft's layer: the backend it picks for the request (or
    auto-selection's), its refusal, and ``seen``: an Observation that already holds the request,
    its claim and the details."""

    platform_choice: str | None
    rejection: tuple[str, ...] | None
    seen: Callable[..., Observation]
    # The FlashAttention version the platform gives a layer with the draft's own settings (Selection).
    flash_attn_version: int | None = None


class ProcessState:
    """The selection lane's vLLM state in one cell process, for its one simulated GPU: vLLM
    imported once, checkpoints written once, distributed state initialised once, reused by every
    cell. (Not a session: the run's session is ``harness.runner.session.MatrixSession``.)"""

    @staticmethod
    def import_vllm() -> None:
        """vLLM's modules this state uses, imported under the installed platform: a process
        key's warm parent does it once for the key's cell processes (``prepare_process``)."""
        vllm_apis()

    def __init__(self, gpu: SimulatedGpu, options: SelectionOptions, matrix_backends: frozenset[str]):
        self.gpu = gpu
        self.options = options
        self.installed = install(gpu)
        self.apis = vllm_apis()
        # Removed when the cell process exits (the runner's spawned children exit normally).
        self._workdir = tempfile.TemporaryDirectory(prefix="dflash-selection-")
        self.checkpoints = ConfigCheckpoints(Path(self._workdir.name), options.head_dim)
        self._distributed = False
        self._flashinfer_host_ready = False
        self.enum_census = census(self.apis.enum)
        self.not_in_matrix = not_in_matrix(self.enum_census, matrix_backends)
        freeze_process_state()

    # -- one cell ---------------------------------------------------------
    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        """One cell, in the order the engine meets it: what this release lacks for it, the
        platform's answer for the draft's layer, the draft vLLM builds behind the target, and
        what its layers carry against what the draft asked. Each step either hands the next
        what it found or ends the cell with the observation that stops it."""
        asked = self.asked(cell)
        if (absent := self.absent_here(cell, asked)) is not None:
            return absent
        stage_log(Stage.SELECT)
        answered = self.platform_answer(cell, asked)
        if isinstance(answered, Observation):
            return answered
        stage_log(Stage.BUILD)
        built = self.built_draft(cell, asked, answered, stage_log)
        if isinstance(built, Observation):
            return built
        return self.judged_layers(cell, asked, answered, built)

    def asked(self, cell: Cell) -> _Asked:
        """The cell's request and loader, and the details every observation of it carries."""
        loader = str(SELECTION.value(cell.values, "loader"))
        details: dict[str, Any] = {
            "simulated": self.installed.gpu.device_name,
            "flashinfer_cubin": self.gpu.flashinfer_cubin,
            "libcuda": self.installed.libcuda,
            "loader": loader,
        }
        if self.options.target_backend:
            details["target_backend"] = self.options.target_backend
        if self.not_in_matrix:
            details["backends_not_in_matrix"] = list(self.not_in_matrix)
        return _Asked(cell.requested_backend, loader, details)

    def absent_here(self, cell: Cell, asked: _Asked) -> Observation | None:
        """A loader this release lacks (Model Runner V1's proposers are gone in 0.34.0) makes the
        whole cell one that cannot exist here, whatever the platform would answer: unavailable
        before the platform is asked, as in the cpu and gpu lanes (missing_for_draft_cell). The
        platform's answer to the same request is the other loader's cell."""
        if missing_api := self.apis.missing_for_selection():
            return asked.unavailable(missing_api)
        if missing_loader := self.apis.missing_for_loader(asked.loader):
            asked.details["draft"] = f"not built: {missing_loader}"
            return asked.unavailable(missing_loader)
        # A KV-cache dtype this release's CacheDType lacks is a deployment it cannot have:
        # unavailable before the platform is asked, as a missing loader is.
        dtypes = self.requested(cell)
        if missing_dtype := self.apis.missing_cache_dtype(dtypes.target_kv_cache_dtype, dtypes.draft_kv_cache_dtype):
            return asked.unavailable(missing_dtype)
        return None

    def platform_answer(self, cell: Cell, asked: _Asked) -> _Answered | Observation:
        """The platform's answer for the draft's layer (``select``): the backend it picks for the
        request (auto-selection where nothing is requested) or its refusal."""
        try:
            selection = self.select(cell)
        except ApiUnavailable as why:
            return asked.unavailable(str(why))
        except Exception as error:
            if NO_DRIVER in str(error):
                return asked.unavailable(host_limit(error))
            return Observation(
                requested_backend=asked.requested, failure=_failure(Stage.SELECT, error), details=asked.details
            )
        asked.details.update(selection.details)
        requested = asked.requested
        # Every fact from here on shares the request, its claim and the details gathered so far.
        return _Answered(
            platform_choice=selection.explicit if requested else selection.auto,
            rejection=selection.rejection if requested else selection.auto_rejection,
            flash_attn_version=selection.flash_attn_version,
            seen=functools.partial(
                Observation, requested_backend=requested, claim=selection.claim, details=asked.details
            ),
        )

    def built_draft(
        self, cell: Cell, asked: _Asked, answered: _Answered, stage_log: StageLog
    ) -> BuiltDraft | Observation:
        """The draft vLLM's loader builds behind the target (``build_draft``), or what stopped it:
        V1's refusal, a release that lacks what the cell needs, the target failing first, the
        loader's refusal (or its selecting another backend than the platform), a crash."""
        details, seen, platform_choice = asked.details, answered.seen, answered.platform_choice
        try:
            return self.build_draft(cell, asked.loader, stage_log)
        except _V1Refusal as refusal:
            # vLLM's own answer for Model Runner V1 (VllmConfig._validate_v1_model_runner).
            details["draft"] = "not built: Model Runner V1 refuses the config"
            return seen(platform_choice=platform_choice, rejection=(str(refusal),))
        except _OptionRefused as refusal:
            details["draft"] = "not built: vLLM's config refuses the draft's speculative option"
            return seen(platform_choice=platform_choice, rejection=(one_line(refusal.__cause__ or refusal, 600),))
        except ApiUnavailable as why:
            details["draft"] = f"not built: {why}"
            return seen(platform_choice=platform_choice, unavailable=str(why))
        except _TargetNotBuilt as stop:
            cause = stop.__cause__ or stop
            details["draft"] = f"not built: the target failed first: {one_line(cause, 300)}"
            if isinstance(cause, ValueError) and (
                SELECTED.search(str(cause))
                or NO_VALID_BACKEND.search(str(cause))
                or str(stop).startswith("the engine refused its config")
            ):
                # The selector refused the target's own backend, or found none, for this config, or
                # the engine refused the config itself: vLLM refuses the deployment as a whole, a
                # refusal (unsupported) whatever the draft asked.
                return seen(platform_choice=platform_choice, rejection=(one_line(cause, 600),))
            return seen(platform_choice=platform_choice, failure=_failure(Stage.BUILD, cause))
        except ValueError as error:
            if answered.rejection is not None:
                # The loader refused the request with a configuration error, as the platform did.
                details["draft"] = f"loader refused it too: {one_line(error, 300)}"
                return seen(platform_choice=platform_choice, rejection=answered.rejection)
            selected = SELECTED.search(str(error))
            if selected is not None and MLA_REFUSED in str(error):
                # The draft's layers are MLA (K3's and Mistral Large 4's DSpark drafts), which the
                # platform question (the lane's non-MLA selector config) did not ask: vLLM's selector
                # refuses the requested backend for them at load (v1/attention/selector.py), a refusal.
                details["draft"] = f"the loader refused the request for MLA draft layers: {one_line(error, 300)}"
                return seen(platform_choice=platform_choice, rejection=(one_line(error, 600),))
            if selected is not None and selected.group(1) != platform_choice:
                # The platform accepts the request, yet the loader selected another backend for
                # the draft's layers (e.g. the target's backend_per_kind), which refused them.
                details["draft"] = (
                    f"the loader selected {selected.group(1)} for the draft layers: {one_line(error, 300)}"
                )
                return seen(platform_choice=platform_choice, observed_backends=(selected.group(1),))
            return seen(platform_choice=platform_choice, failure=_failure(Stage.BUILD, error))
        except Exception as error:
            if NO_DRIVER in str(error) or NO_CPU_KERNEL.search(str(error)):
                details["draft"] = "not built: constructing it needs a real CUDA device"
                return seen(platform_choice=platform_choice, unavailable=host_limit(error))
            return seen(platform_choice=platform_choice, failure=_failure(Stage.BUILD, error))

    def judged_layers(self, cell: Cell, asked: _Asked, answered: _Answered, layers: BuiltDraft) -> Observation:
        """What the built draft's layers carry against what the draft asked (``audit``), the
        engine's start-up with them, and the KV cache vLLM lays out for them."""
        details, seen, platform_choice, rejection = (
            asked.details,
            answered.seen,
            answered.platform_choice,
            answered.rejection,
        )
        details["draft_layers"] = [
            f"{name}: {backend} ({impl}, kv {settings.get('kv_cache_dtype', '')})"
            for name, backend, impl, settings in zip(
                layers.names, layers.backends, layers.impls, layers.settings, strict=True
            )
        ]
        details["layer_settings"] = dict(zip(layers.names, layers.settings, strict=True))
        observed = layers.backends
        requested_dtypes = dataclasses.replace(self.requested(cell), flash_attn_version=answered.flash_attn_version)
        wanted = audit.asked(self.draft_truth(cell), requested_dtypes)
        if unaudited := audit.unaudited(layers.settings, wanted):
            details["settings_not_audited"] = unaudited
        if layers.option is not None:
            details["draft_option"] = {"read": layers.option.read, "not_judged": list(layers.option.not_judged)}
        lost = tuple(str(found) for found in audit.differences(layers.names, wanted, layers.settings))
        details["draft_model_class"] = layers.model_class
        if layers.model_class != layers.asked_class:
            lost = (str(audit.SettingDifference("model", "model_class", layers.asked_class, layers.model_class)), *lost)
        lost += layers.option.lost if layers.option is not None else ()
        if layers.provenance is not None:
            details["provenance"] = provenance.details(layers.provenance)
        if layers.startup is not None:
            return self.stopped_at_startup(layers.startup, answered, details)
        if layers.kv_cache is None:
            details["kv_cache"] = f"not laid out: {layers.kv_cache_missing}"
        else:
            details["kv_cache"] = layers.kv_cache.details()
            # The draft's metadata built for another block size than the cache it is bound to.
            lost += tuple(str(found) for found in kv_cache.disagreements(layers.kv_cache))
        if lost:
            if rejection is not None:
                # Both facts stand: the platform refuses the request, yet a draft was built (the loader
                # never passed the request on: PR #46770's cells before 0.25.0), and its layers carry
                # settings they did not ask for. The lost request is the verdict; the settings go beside it.
                details["draft"] = "built although the platform rejects the request: the loader lost it"
                return seen(platform_refusal=rejection, observed_backends=observed, lost_settings=lost)
            return seen(platform_choice=platform_choice, observed_backends=observed, lost_settings=lost)
        if rejection is not None:
            # The platform refuses this request, yet the loader built a draft: it never passed
            # the request on (wrong-backend), and the verdict must not read 'unsupported'.
            details["draft"] = "built although the platform rejects the request: the loader lost it"
            return seen(platform_refusal=rejection, observed_backends=observed)
        # The provenance audit decides only a cell every other check passes, so the verdicts and
        # messages the matrix records stay as they are (issue 38); elsewhere its findings are in the
        # details alone.
        found = provenance.verdict_differences(layers.provenance) if layers.provenance is not None else ()
        if found and all(backend == platform_choice for backend in observed):
            lost = tuple(str(difference) for difference in found)
            return seen(platform_choice=platform_choice, observed_backends=observed, lost_settings=lost)
        return seen(platform_choice=platform_choice, observed_backends=observed)

    @staticmethod
    def stopped_at_startup(halted: StartupStop, answered: _Answered, details: dict[str, Any]) -> Observation:
        """The engine stops at start-up with these layers: no request is ever served, so that is
        the verdict, whatever the layers carry (their settings stay in the details)."""
        seen, platform_choice = answered.seen, answered.platform_choice
        details["kv_cache"] = f"not laid out: the engine's start-up stops ({halted.path})"
        details["startup"] = {"path": halted.path, "message": halted.message}
        if halted.kind == "refusal":
            return seen(platform_choice=platform_choice, rejection=(halted.message,), rejection_stage=Stage.STARTUP)
        if halted.kind == "host-limit":
            return seen(platform_choice=platform_choice, unavailable=f"{HOST_LIMIT}{halted.message}")
        return seen(platform_choice=platform_choice, failure=Failure(Stage.STARTUP, halted.error_type, halted.message))

    def selector_config(self, cell: Cell) -> Any:
        """The selector inputs of the draft's attention layer, as vLLM's Attention builds them."""
        wanted: dict[str, Any] = {
            "head_size": self.head_size(cell),
            # The draft's layers are built in the target's dtype (by design, draft_model_config).
            "dtype": getattr(self.apis.torch, str(SELECTION.value(cell.values, "target_dtype"))),
            # The draft's layers select with the draft's own cache dtype when one is set.
            "kv_cache_dtype": self.requested(cell).kv_cache_dtype,
            "block_size": None,
            "has_sink": bool(cell.get("sink")),
            "use_non_causal": not bool(cell.get("causal")),
        }
        fields = self.apis.selector_config._fields
        for name, value in wanted.items():
            # A release that predates a selector input cannot be asked about it; one that only
            # lacks it where the cell does not need it (False) is asked without it.
            if name not in fields and value:
                raise ApiUnavailable(f"this vLLM release's AttentionSelectorConfig has no {name} field")
        return self.apis.selector_config(**{name: value for name, value in wanted.items() if name in fields})

    def draft_truth(self, cell: Cell) -> DraftTruth:
        """The cell's draft checkpoint: its spec, head size and own heads on the lane's shape."""
        spec, _ = draft_spec(cell.values)
        return self.checkpoints.draft(spec, draft_shape(cell.values, self.checkpoints.shape))

    def head_size(self, cell: Cell) -> int:
        """The cell's head size; without the axis, the lane's head_dim option."""
        return int(cell.get("head_size") or self.options.head_dim)

    @staticmethod
    def requested(cell: Cell) -> audit.Requested:
        """What the cell's engine arguments ask of the draft's dtypes (``harness.attention.audit``)."""
        own = str(cell.get("draft_kv_cache_dtype", "target"))
        return audit.Requested(
            None if own == "target" else own,
            str(SELECTION.value(cell.values, "kv_cache_dtype")),
            str(SELECTION.value(cell.values, "target_dtype")),
        )

    def select(self, cell: Cell) -> Selection:
        apis = self.apis
        config = self.selector_config(cell)
        platform_cls = type(self.installed.platform)
        capability = platform_cls.get_device_capability()
        selection = Selection()
        with apis.set_current_vllm_config(apis.vllm_config()):
            requested = cell.requested_backend
            if requested is not None:
                member = apis.member(requested)
                try:
                    backend_cls = member.get_class()
                except ImportError as error:
                    raise ApiUnavailable(
                        f"AttentionBackendEnum.{requested} points to {member.value}, which this vLLM cannot import "
                        f"({type(error).__name__}: {one_line(error, 200)})"
                    ) from None
                reasons = tuple(backend_cls.validate_configuration(device_capability=capability, **config._asdict()))
                selection.claim = Claim(supported=not reasons, reasons=reasons)
                try:
                    path = platform_cls.get_attn_backend_cls(member, attn_selector_config=config)
                    selection.explicit = apis.backend_name(path)
                except ValueError as error:
                    selection.rejection = rejection_reasons(error)
                selection.details["selected"] = selection.explicit or "rejected"
            # FlashAttentionImpl.__init__'s own question (flash_attn.py), for the draft's settings.
            selection.flash_attn_version = apis.platform_flash_attn_version(config.head_size, bool(config.has_sink))
            try:
                selection.auto = apis.backend_name(platform_cls.get_attn_backend_cls(None, attn_selector_config=config))
                selection.details["auto_selected"] = selection.auto
            except ValueError as error:
                selection.auto_rejection = (one_line(error, 600),)
                selection.details["auto_selected"] = f"none: {one_line(error, 300)}"
        return selection

    # -- the draft --------------------------------------------------------
    def build_draft(self, cell: Cell, loader: str, stage_log: StageLog) -> BuiltDraft:
        """Build the draft through vLLM's real loader, as the cpu and gpu lanes do
        (``harness.attention.draft``), on device cpu, and read every attention layer it carries:
        its backend, impl and the settings the audit compares (``harness.attention.audit``)."""
        from harness.attention.draft import (
            LoaderUnavailable,
            init_single_process_group,
            load_draft,
            load_target,
            v1_refusal,
        )

        apis = self.apis
        # Any draft may end up on FlashInfer (auto-selection, an inherited target backend, a
        # lost request), so its host patch is always in place before a build.
        self._allow_flashinfer_on_host()
        option = str(SELECTION.value(cell.values, "draft_option"))
        if (absent := unregistered_draft(DRAFT_MODELS[str(cell.get("method", "dflash"))].architecture)) is not None:
            raise ApiUnavailable(absent)
        try:
            config = self.engine_config(cell)
        except ValueError as error:  # pydantic's ValidationError is one
            # A validator that names a field the option sets refuses the option (e.g. "dspark_draft_topk
            # is only supported by DSpark").
            if any(field in str(error) for field, _ in DRAFT_OPTIONS[option].fields):
                raise _OptionRefused(str(error)) from error
            # Otherwise the engine refuses the target's own settings (a float --kv-cache-dtype other
            # than its --dtype, config/vllm.py _reject_mismatched_float_kv_cache): no target, no draft.
            raise _TargetNotBuilt(f"the engine refused its config: {error}") from error
        if loader == "v1" and (refusal := v1_refusal(config)) is not None:
            raise _V1Refusal(refusal)
        with apis.set_current_vllm_config(config):
            if not self._distributed:
                init_single_process_group(self.checkpoints.root, "gloo")
                self._distributed = True
            method = str(cell.get("method", "dflash"))
            # The real target, built first under the cell's config as the engine builds it, so
            # its attention layers share the draft's KV-cache manager (kv_cache.lay_out).
            try:
                target = load_target(config)
            except Exception as error:
                if NO_DRIVER in str(error):
                    raise
                raise _TargetNotBuilt(str(error)) from error
            target_layers = tuple(kv_cache.attention_layers(config))
            try:
                loaded = load_draft(loader, target, config, apis.torch.device("cpu"), method)
            except LoaderUnavailable as why:
                raise ApiUnavailable(f"this vLLM release has {why}") from None
            modules = [
                (name, module)
                for name, module in loaded.model.named_modules()
                if isinstance(module, apis.attention_layer_base)
            ]
            # The causal flag per layer comes from the loader's own reading (one per draft layer).
            causal = loaded.causal if len(loaded.causal) == len(modules) else (None,) * len(modules)
            settings = tuple(
                audit.effective(module, config, flag) for (_, module), flag in zip(modules, causal, strict=True)
            )
            # The draft's effective config: the one its loader handed get_model (draft.recording_builds).
            judged = self.provenance(cell, config, loaded.build.vllm_config if loaded.build else None, modules)
            missing = kv_cache.missing_api()
            layout = None
            startup = None
            if missing is None:
                stage_log(Stage.STARTUP)
                try:
                    layout = self.lay_out_kv_cache(cell, loader, config, target, target_layers, loaded)
                except Exception as error:
                    # What the engine's start-up does with these layers: a refusal vLLM documents
                    # (no KV-cache layout every backend supports), an unexpected raise, or a
                    # question this host cannot answer (rejections.startup_stop).
                    startup = startup_stop(error)
        return BuiltDraft(
            names=tuple(name for name, _ in modules),
            backends=tuple(module.get_attn_backend().get_name() for _, module in modules),
            impls=tuple(type(getattr(module, "impl", None)).__name__ for _, module in modules),
            settings=settings,
            kv_cache=layout,
            kv_cache_missing=missing,
            startup=startup,
            option=draft_options.check(option, config, loaded.build) if option != NO_OPTION else None,
            provenance=judged,
            model_class=type(loaded.model).__name__,
            asked_class=DRAFT_MODELS[method].model_class,
        )

    def provenance(
        self, cell: Cell, config: Any, draft_config: Any, modules: list[tuple[str, Any]]
    ) -> provenance.Judgement:
        """The provenance audit (``harness.attention.provenance``) of the draft just built: its
        layers against reference layers built for what it asked, its effective config (the one its
        loader gave ``get_model``) against the target's and the documented overrides. Runs under
        the cell's config, before the KV cache is laid out."""
        from harness.attention.draft import asked_draft_config, layer_provenance

        truth = self.draft_truth(cell)
        speculative = provenance.read(config.speculative_config).values
        overrides = provenance.documented_overrides(speculative, truth.any_non_causal)
        dtype = getattr(self.apis.torch, str(SELECTION.value(cell.values, "target_dtype")))
        layers = provenance.judge_layers(layer_provenance(modules, truth, asked_draft_config(config, overrides), dtype))
        if draft_config is None:
            return provenance.combine(
                layers, provenance.Judgement((), ("draft config: no model load was recorded",), {})
            )
        target = provenance.config_fields(config)
        draft = provenance.config_fields(draft_config)
        family = draft_family(str(cell.get("method", "dflash")))
        return provenance.combine(layers, provenance.judge_config(draft, target, overrides, family))

    def lay_out_kv_cache(
        self, cell: Cell, loader: str, config: Any, target: Any, target_layers: tuple[str, ...], loaded: Any
    ) -> KvCacheLayout:
        """The KV cache of the cell's target and draft as Model Runner V2 and its speculator lay
        it out (``harness.attention.kv_cache``), after the engine has settled the block size and
        layout over every layer, with the start-up's CUDA-graph decision between the runner's
        builders and the speculator's. Runs under the cell's config."""
        from harness.attention.draft import draft_attention_config, settle_kv_cache

        device = self.apis.torch.device("cpu")
        if loader == "v1":
            # DFlashProposer.load_model marked its draft layers itself.
            draft_layers = set(kv_cache.attention_layers(config)) - set(target_layers)
            speculator = kv_cache.v1_proposer(loaded.proposer)
        else:
            draft_layers = kv_cache.mark_draft_layers(config, target_layers)
            truth = self.draft_truth(cell)
            attention = draft_attention_config(config, truth.any_non_causal)
            speculator = kv_cache.v2_speculator(attention, draft_layers, device)
        settle_kv_cache(config, list(kv_cache.attention_layers(config).values()))
        # A pool sized from what the cell's target and draft need (kv_cache.pool_bytes): a fixed
        # 4 MiB was below one request with head-256 or fp32 pages, a refusal no 80 GiB GPU gives.
        graphs = kv_cache.graph_inputs(config, target, loader)
        return kv_cache.lay_out(config, draft_layers, device, speculator, kv_cache.pool_bytes(config), graphs)

    def engine_config(self, cell: Cell) -> Any:
        """A fresh VllmConfig per draft (``harness.attention.draft.engine_config``, as the cpu and
        gpu lanes make theirs): layers register by name in the config they are built under, so a
        second draft in the same config fails with 'Duplicate layer name'. Dummy weights, on
        device cpu: the simulated CUDA platform would put the model on "cuda"."""
        truth = self.draft_truth(cell)
        deployment = selection_deployment(cell.values, self.options.target_backend)
        target = self.checkpoints.target_of(
            str(SELECTION.value(cell.values, "target_model")),
            deployment.dtype,
            str(SELECTION.value(cell.values, "target_head")),
        )
        return engine_config(target, truth.path, deployment)

    def _allow_flashinfer_on_host(self) -> None:
        if not self._flashinfer_host_ready:
            allow_host_flashinfer_impl()
            self._flashinfer_host_ready = True
