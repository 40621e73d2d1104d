#!/usr/bin/env python3
"""Compatibility test: the C writer and the Python reference writer agree.

Usage: compat_test.py CAPSTORE WORKDIR

For every spec in specs/ (and a generated 5,000-record one) it requires:
  - `capstore pack build` output byte-identical to the reference writer's;
  - `capstore pack verify` to accept the reference pack;
  - `capstore pack info` to show the footer the pack holds, as canonical;
  - `capstore pack key` to give the reference's object key and metadata.
Then: golden packs still match the reference writer, both writers refuse every
spec in specs_bad/, a pack mixing tenants (which only the reference writes) is
readable but has no key, and single-byte corruptions are refused by kind.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dmi_pack_ref  # noqa: E402
import gen_many  # noqa: E402

FAILURES = []
CHECKS = 0


def check(condition, message):
    global CHECKS
    CHECKS += 1
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message, file=sys.stderr)


def run(args):
    return subprocess.run(args, capture_output=True, text=True, check=False)


def ref_build(spec_path, out_path, *extra):
    with open(spec_path, "rb") as handle:
        spec = json.load(handle)
    data = dmi_pack_ref.build_pack(spec, os.path.dirname(os.path.abspath(spec_path)),
                                   allow_mixed_keys="--allow-mixed-keys" in extra)
    with open(out_path, "wb") as handle:
        handle.write(data)
    return spec, data


def ref_key(spec, data, prefix):
    return {"content_type": dmi_pack_ref.CONTENT_TYPE,
            "key": dmi_pack_ref.object_key(spec, prefix),
            "metadata": dmi_pack_ref.object_metadata(spec, data)}


def check_spec(capstore, spec_path, work):
    name = os.path.splitext(os.path.basename(spec_path))[0]
    ref_path = os.path.join(work, name + ".ref.dmi-pack")
    c_path = os.path.join(work, name + ".c.dmi-pack")
    spec, data = ref_build(spec_path, ref_path)
    built = run([capstore, "pack", "build", spec_path, c_path])
    check(built.returncode == 0, f"{name}: capstore pack build failed: {built.stderr}")
    if built.returncode == 0:
        with open(c_path, "rb") as handle:
            ours = handle.read()
        same = ours == data
        first_diff = next((i for i, (a, b) in enumerate(zip(ours, data)) if a != b),
                          min(len(ours), len(data)))
        check(same, f"{name}: C pack differs from the reference at byte {first_diff} "
                    f"({len(ours)} vs {len(data)} bytes)")
    verified = run([capstore, "pack", "verify", ref_path])
    check(verified.returncode == 0, f"{name}: verify refused the reference pack: {verified.stderr}")
    info = run([capstore, "pack", "info", ref_path])
    check(info.returncode == 0, f"{name}: info failed: {info.stderr}")
    if info.returncode == 0:
        shown = json.loads(info.stdout)
        footer_offset = shown["trailer"]["footer_offset"]
        footer = json.loads(data[footer_offset:len(data) - 64])
        check(shown["footer"] == footer, f"{name}: info shows another footer")
        check(shown["footer_canonical"] is True, f"{name}: reference footer not canonical")
    if spec["records"]:
        for prefix in ("", "catalog-a/"):
            got = run([capstore, "pack", "key", ref_path, "--prefix", prefix])
            check(got.returncode == 0, f"{name}: key failed: {got.stderr}")
            if got.returncode == 0:
                check(json.loads(got.stdout) == ref_key(spec, data, prefix),
                      f"{name}: key/metadata differ for prefix {prefix!r}: {got.stdout}")
    return name


def check_golden(capstore, work):
    golden_dir = os.path.join(HERE, "golden")
    for entry in sorted(os.listdir(golden_dir)):
        name = entry[: -len(".dmi-pack")]
        with open(os.path.join(golden_dir, entry), "rb") as handle:
            golden = handle.read()
        spec_path = os.path.join(HERE, "specs", name + ".json")
        _, data = ref_build(spec_path, os.path.join(work, name + ".golden-check"))
        check(data == golden, f"golden {name}: the reference writer no longer writes it")
        verified = run([capstore, "pack", "verify", os.path.join(golden_dir, entry)])
        check(verified.returncode == 0, f"golden {name}: verify refused it: {verified.stderr}")


def check_bad_specs(capstore, work):
    bad_dir = os.path.join(HERE, "specs_bad")
    for entry in sorted(os.listdir(bad_dir)):
        spec_path = os.path.join(bad_dir, entry)
        out = os.path.join(work, "bad.dmi-pack")
        with open(spec_path, "rb") as handle:
            spec = json.load(handle)
        try:
            dmi_pack_ref.build_pack(spec, bad_dir)
            check(False, f"bad {entry}: the reference writer accepted it")
        except dmi_pack_ref.SpecError:
            pass
        result = run([capstore, "pack", "build", spec_path, out])
        check(result.returncode == 1, f"bad {entry}: capstore exit {result.returncode}")
        check(not os.path.exists(out) and not os.path.exists(out + ".tmp"),
              f"bad {entry}: a partial pack was left behind")


def check_mixed(capstore, work):
    spec_path = os.path.join(HERE, "specs_bad", "mixed_tenant.json")
    path = os.path.join(work, "mixed.ref.dmi-pack")
    ref_build(spec_path, path, "--allow-mixed-keys")
    verified = run([capstore, "pack", "verify", path])
    check(verified.returncode == 0, f"mixed: verify refused a valid pack: {verified.stderr}")
    key = run([capstore, "pack", "key", path])
    check(key.returncode == 1 and "key_fields" in key.stderr,
          f"mixed: key should refuse with key_fields: {key.returncode} {key.stderr}")


def corrupt(capstore, source, work, at, kind):
    with open(source, "rb") as handle:
        data = bytearray(handle.read())
    data[at % len(data)] ^= 0x01
    path = os.path.join(work, f"corrupt-{kind}.dmi-pack")
    with open(path, "wb") as handle:
        handle.write(data)
    result = run([capstore, "pack", "verify", path])
    check(result.returncode == 1 and f": {kind}: " in result.stderr,
          f"corrupt byte {at} should give {kind}: {result.returncode} {result.stderr.strip()}")


def check_corruptions(capstore, work):
    source = os.path.join(HERE, "golden", "dtypes.dmi-pack")
    size = os.path.getsize(source)
    corrupt(capstore, source, work, 0, "bad_magic")
    corrupt(capstore, source, work, 10, "newer_minor")
    corrupt(capstore, source, work, 12, "header_size")
    corrupt(capstore, source, work, 20, "mismatch")
    corrupt(capstore, source, work, 50, "header_field")
    corrupt(capstore, source, work, 64, "payload_crc")
    corrupt(capstore, source, work, 67, "padding")
    corrupt(capstore, source, work, size - 200, "footer_crc")
    corrupt(capstore, source, work, size - 64, "bad_magic")
    corrupt(capstore, source, work, size - 56, "unknown_major")
    corrupt(capstore, source, work, size - 1, "sha256")


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    capstore, work = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    os.makedirs(work, exist_ok=True)
    many = os.path.join(work, "many.json")
    gen_many.main([many, "5000"])
    specs = sorted(os.path.join(HERE, "specs", e) for e in os.listdir(os.path.join(HERE, "specs"))
                   if e.endswith(".json"))
    names = [check_spec(capstore, path, work) for path in specs + [many]]
    check_golden(capstore, work)
    check_bad_specs(capstore, work)
    check_mixed(capstore, work)
    check_corruptions(capstore, work)
    print(f"pack compat: {len(names)} specs ({', '.join(names)}), {CHECKS} checks, "
          f"{len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
