"""Engine image build plans: rendered Dockerfiles (golden files), content-hash tags, image_ref.

Regenerate the golden files after a deliberate template or profile change with
``RIGFORGE_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_images.py`` and review the diff.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rigforge.images.plans import (
    REPOSITORY,
    ImagePlanError,
    build_plan,
    content_hash,
    dockerfile_quote,
    image_ref,
    patch_file_name,
)
from rigforge.profile import Profile
from rigforge.profile.loader import load_profile
from rigforge.render import render

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "images"
REAL_PROFILES = ("2x-pix", "4x-threadripper", "8x-turin")
PATCH = {"url": "https://example.org/k64/flashinfer-k64.patch", "sha256": "ab" * 32, "root": "flashinfer"}


def _golden(path: Path, text: str) -> None:
    if os.environ.get("RIGFORGE_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with RIGFORGE_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{path} differs from the rendered text (RIGFORGE_UPDATE_GOLDEN=1 to accept)"


def example_commits(profile: Profile) -> dict[str, str]:
    """Stand-in commits for the git refs a profile's build names (a rig resolves them with git ls-remote)."""
    plan = build_plan(profile)
    assert plan is not None
    return {ref.arg: hashlib.sha1(ref.arg.encode()).hexdigest() for ref in plan.git_refs}


def _plan_json(profile: Profile) -> str:
    plan = build_plan(profile, example_commits(profile))
    assert plan is not None
    return render("images/build-plan.json.j2", profile, plan=plan.record())


@pytest.mark.parametrize("name", REAL_PROFILES)
def test_real_profiles_render_their_dockerfile_and_build_plan(name: str) -> None:
    profile = load_profile(name)
    plan = build_plan(profile, example_commits(profile))
    assert plan is not None and plan.resolved
    _golden(GOLDEN / name / "Dockerfile", plan.dockerfile)
    _golden(GOLDEN / name / "build-plan.json", _plan_json(profile))


def test_a_profile_with_a_patch_renders_the_patch_steps() -> None:
    profile = load_profile("4x-threadripper", {"engine": {"build": {"patches": [PATCH]}}})
    plan = build_plan(profile)
    assert plan is not None
    _golden(GOLDEN / "4x-threadripper-with-patch" / "Dockerfile", plan.dockerfile)
    assert plan.patches[0].file == "patches/01-flashinfer-k64.patch"
    assert set(plan.context_files) == {"apply_patch.py", "image_contents.py"}
    assert (f"RUN python3 /opt/rigforge/apply_patch.py /opt/rigforge/patches/01-flashinfer-k64.patch "
            f"--package flashinfer --sha256 {'ab' * 32}") in plan.dockerfile


def test_every_dockerfile_targets_sm120_and_pins_from_the_profile() -> None:
    for name in REAL_PROFILES:
        profile = load_profile(name)
        plan = build_plan(profile)
        assert plan is not None and profile.engine.build is not None
        assert plan.dockerfile.startswith(f"# managed by rigforge, profile {name}")
        assert 'ARG TORCH_CUDA_ARCH_LIST="12.0a"' in plan.dockerfile
        assert 'ARG CUBLAS_PIN="nvidia-cublas==13.1.0.3"' in plan.dockerfile
        assert f'ARG BASE_IMAGE="{profile.engine.build.base_image}"\nFROM ${{BASE_IMAGE}}' in plan.dockerfile
        assert not any(line.startswith("ENTRYPOINT") for line in plan.dockerfile.splitlines())  # engine.command runs
        assert plan.args == {"BASE_IMAGE": profile.engine.build.base_image, **profile.engine.build.args}
        assert not plan.resolved and plan.tag.endswith(plan.request_hash)  # refs as named: not a buildable tag


def test_the_tag_is_a_content_hash_of_the_inputs() -> None:
    base = build_plan(load_profile("2x-pix"))
    again = build_plan(load_profile("2x-pix"))
    changed_arg = build_plan(load_profile("2x-pix", {"engine": {"build": {"args": {"B12X_VERSION": "0.8.6"}}}}))
    changed_base = build_plan(load_profile("2x-pix", {"engine": {"build": {
        "base_image": "nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04"}}}))
    with_patch = build_plan(load_profile("2x-pix", {"engine": {"build": {"patches": [PATCH]}}}))
    other = {**PATCH, "sha256": "cd" * 32}
    other_patch = build_plan(load_profile("2x-pix", {"engine": {"build": {"patches": [other]}}}))
    assert base and again and changed_arg and changed_base and with_patch and other_patch
    assert base.tag == again.tag
    assert base.tag.startswith("rigforge/sglang:") and len(base.content_hash) == 16
    tags = {p.tag for p in (base, changed_arg, changed_base, with_patch, other_patch)}
    assert len(tags) == 5


def test_the_tag_does_not_depend_on_the_profile_name() -> None:
    # 8x-turin builds the same image as 2x-pix except for MAX_JOBS: equal inputs, equal tag.
    turin = build_plan(load_profile("8x-turin", {"engine": {"build": {"args": {"MAX_JOBS": "32"}}}}))
    pix = build_plan(load_profile("2x-pix"))
    assert turin and pix
    assert turin.dockerfile != pix.dockerfile  # the managed-by line names the profile
    assert turin.tag == pix.tag


def test_content_hash_covers_context_files_and_patch_order() -> None:
    args = {"BASE_IMAGE": "base:1"}
    one = content_hash("FROM x\n", args, {"apply_patch.py": "v1"}, ["a" * 64, "b" * 64])
    assert one == content_hash("FROM x\n", dict(args), {"apply_patch.py": "v1"}, ["a" * 64, "b" * 64])
    assert one != content_hash("FROM x\n", args, {"apply_patch.py": "v2"}, ["a" * 64, "b" * 64])
    assert one != content_hash("FROM x\n", args, {"apply_patch.py": "v1"}, ["b" * 64, "a" * 64])
    assert one != content_hash("FROM y\n", args, {"apply_patch.py": "v1"}, ["a" * 64, "b" * 64])


def test_build_arguments_name_tag_labels_args_and_context() -> None:
    plan = build_plan(load_profile("4x-threadripper"))
    assert plan is not None
    arguments = plan.docker_build_arguments()
    assert arguments[:2] == ["--tag", plan.tag]
    assert f"org.rigforge.build-hash={plan.content_hash}" in arguments
    assert "VLLM_REF=v0.19.1" in arguments
    assert arguments[-3:] == ["--file", "/var/lib/rigforge/images/vllm/Dockerfile", "/var/lib/rigforge/images/vllm"]
    assert plan.log_path == f"/var/log/rigforge/image-vllm-{plan.content_hash}.log"


def test_image_ref_is_the_built_tag_or_the_published_image() -> None:
    built = load_profile("2x-pix")
    plan = build_plan(built)
    assert plan is not None and image_ref(built) == plan.tag
    published = load_profile("8x-turin", {"engine": {"build": None, "image": "lmsysorg/sglang:dev-cu13"}})
    assert build_plan(published) is None
    assert image_ref(published) == "lmsysorg/sglang:dev-cu13"
    with pytest.raises(ImagePlanError, match="runs natively"):
        image_ref(load_profile("sandbox"))


def test_a_missing_build_arg_names_the_template() -> None:
    profile = load_profile("2x-pix")
    assert profile.engine.build is not None
    args = {k: v for k, v in profile.engine.build.args.items() if k != "B12X_VERSION"}
    broken = profile.model_copy(update={"engine": profile.engine.model_copy(
        update={"build": profile.engine.build.model_copy(update={"args": args})})})
    with pytest.raises(ImagePlanError, match=r"sglang-b12x\.Dockerfile\.j2.*B12X_VERSION"):
        build_plan(broken)


def test_an_unknown_dockerfile_lists_the_templates() -> None:
    profile = load_profile("2x-pix", {"engine": {"build": {"dockerfile": "tensorrt"}}})
    with pytest.raises(ImagePlanError, match=r"'tensorrt'.*have: .*sglang-b12x.*vllm"):
        build_plan(profile)


def test_dockerfile_quote_and_patch_file_names() -> None:
    assert dockerfile_quote("transformers>=5.3.0,<5.4") == '"transformers>=5.3.0,<5.4"'
    assert dockerfile_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert patch_file_name(1, "https://example.org/p/k64%20fix.patch?raw=1") == "patches/01-k64_20fix.patch"
    assert patch_file_name(12, "https://example.org/") == "patches/12-patch"
    assert patch_file_name(2, "https://example.org/..hidden") == "patches/02-hidden"


def test_jit_cache_volume_must_be_a_listed_named_volume() -> None:
    with pytest.raises(Exception, match="jit_cache_volume 'elsewhere' must be a named volume"):
        load_profile("2x-pix", {"engine": {"docker": {"jit_cache_volume": "elsewhere"}}})


def test_4x_k64_recipe_applies_the_repository_k64_patch_and_compile_checks_it() -> None:
    profile = load_profile("4x-threadripper").with_recipe("wiki-k64")
    plan = build_plan(profile)
    assert plan is not None and profile.engine.build is not None
    declared = profile.engine.build.patches[0]
    source = REPOSITORY / "patches" / "flashinfer-0.6.6-sm120-k64.patch"
    assert declared.path == "patches/flashinfer-0.6.6-sm120-k64.patch" and declared.enabled
    assert declared.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    patch = plan.patches[0]
    assert patch.url is None and patch.file == "patches/01-flashinfer-0.6.6-sm120-k64.patch"
    assert plan.context_files[patch.file] == source.read_text()
    assert set(plan.context_files) == {"apply_patch.py", "image_contents.py", patch.file, "check/k64_check.py",
                                       "check/k64_collective.cu"}
    applied = plan.dockerfile.index(f"--package flashinfer --sha256 {declared.sha256}")
    checked = plan.dockerfile.index(f"k64_check.py --package flashinfer --patch {patch.file}")
    pinned = plan.dockerfile.index('[ "${installed}" != "${FLASHINFER_VERSION}" ]')
    assert pinned < applied < checked
    assert 'ARG FLASHINFER_VERSION="0.6.6"' in plan.dockerfile


def test_a_disabled_patch_is_not_applied_and_changes_the_tag() -> None:
    profile = load_profile("4x-threadripper").with_recipe("wiki-k64")
    assert profile.engine.build is not None
    declared = profile.engine.build.patches[0].model_dump(mode="json")
    stock = build_plan(load_profile("4x-threadripper", {"engine": {"build": {"patches": [
        {**declared, "enabled": False}]}}}))
    patched = build_plan(profile)
    wiki = build_plan(load_profile("4x-threadripper"))
    assert stock is not None and patched is not None and wiki is not None
    assert stock.patches == () and "apply_patch.py" not in stock.dockerfile and "k64_check" not in stock.dockerfile
    assert stock.tag != patched.tag and stock.tag == wiki.tag


def test_a_repository_patch_with_another_sha256_is_refused() -> None:
    profile = load_profile("4x-threadripper", {"engine": {"build": {"patches": [
        {"path": "patches/flashinfer-0.6.6-sm120-k64.patch", "sha256": "cd" * 32, "root": "flashinfer"}]}}})
    with pytest.raises(ImagePlanError, match=r"^engine.build.patches: patches/flashinfer-0.6.6-sm120-k64.patch "
                                             r"has sha256 [0-9a-f]{64}, the profile pins (cd){32}$"):
        build_plan(profile)
