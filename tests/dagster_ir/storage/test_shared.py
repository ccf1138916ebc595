"""The shared-mount probe: mount lookup, lock exclusion across processes, refused mount kinds."""

from dagster_ir.storage.shared import mount_of, probe

MOUNTS = """\
sysfs /sys sysfs rw,nosuid 0 0
/dev/sda1 / ext4 rw,relatime 0 0
server:/export /mnt/data nfs4 rw,vers=4.2,hard 0 0
server:/old /mnt/data/old nfs rw,vers=3,nolock 0 0
bucket /mnt/bucket fuse.s3fs rw 0 0
"""


def test_mount_of_takes_the_longest_mount_point(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    assert mount_of("/mnt/data/run/tables", mounts) == ("/mnt/data", "nfs4", "rw,vers=4.2,hard")
    assert mount_of("/mnt/data/old/x", mounts)[1:] == ("nfs", "rw,vers=3,nolock")
    assert mount_of("/mnt/database", mounts)[0] == "/"  # a prefix of the name is not the mount
    assert mount_of("/x", tmp_path / "missing") == ("/", "unknown", "")


def test_probe_of_a_local_folder(tmp_path):
    report = probe(tmp_path / "data")
    assert report.locks_exclude  # flock held here refuses a spawned process
    assert report.problems == []
    assert len(report.hosts) == 1
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "data").rglob("*"))


def test_probe_reports_unsafe_mounts(tmp_path, monkeypatch):
    import dagster_ir.storage.shared as shared

    monkeypatch.setattr(shared, "mount_of", lambda path: ("/mnt/data/old", "nfs", "rw,vers=3,nolock"))
    assert any("nolock" in p for p in probe(tmp_path).problems)
    monkeypatch.setattr(shared, "mount_of", lambda path: ("/mnt/bucket", "fuse.s3fs", "rw"))
    assert any("object-store" in p for p in probe(tmp_path).problems)
