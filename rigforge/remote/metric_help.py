"""What each of rigforge's health metrics is: its ``# HELP`` line (its ``# TYPE`` is counter when it ends in _total).

Standard library only: installed beside ``health_metrics.py`` on the rig. Per-GPU series carry ``gpu`` (index),
``uuid`` and ``pci_bus_id`` (sysfs' form, ``0000:41:00.0``); those read outside nvidia-smi's query (Xid, replays,
AER) carry ``uuid`` and ``pci_bus_id`` only. The rules and the dashboard may name only these (a unit test says so).
"""

from __future__ import annotations

HELP = {
    "rigforge_health_metrics_last_run_timestamp_seconds": "When this file was written (unix seconds).",
    "rigforge_health_metrics_interval_seconds": "Seconds between two writes (monitoring.interval_s).",
    "rigforge_health_metrics_cpu_seconds_total": "CPU seconds every write since the rig booted took, nvidia-smi "
                                                 "included.",
    "rigforge_health_metrics_writes_total": "Writes since the rig booted.",
    "rigforge_health_metrics_part_ok": "1 when the part (gpu, journal, engine, bench, disks, pcie) finished within "
                                       "its bound without an error.",
    "rigforge_health_metrics_part_timed_out": "1 when the part was still running at its bound (its values are "
                                              "missing, or the last ones for counts).",
    "rigforge_health_metrics_part_duration_seconds": "Seconds the part took (its bound when it timed out).",
    "rigforge_gpus_expected": "GPUs the profile expects (0: a CPU-only rig).",
    "rigforge_gpus_found": "GPUs nvidia-smi lists (0 where it does not run or answer).",
    "rigforge_nvidia_smi_present": "1 when nvidia-smi is installed.",
    "rigforge_nvidia_smi_ok": "1 when the nvidia-smi query gave every GPU's values (exit 0, or 14: infoROM "
                              "corrupted).",
    "rigforge_nvidia_smi_exit_code": "The query's exit status (man nvidia-smi, RETURN VALUE); absent when it "
                                     "timed out.",
    "rigforge_nvidia_smi_fields_refused": "Query fields this driver does not know, left out of the query.",
    "rigforge_nvidia_smi_inforom_valid": "0 when nvidia-smi exits 14: a GPU's infoROM is corrupted.",
    "rigforge_gpu_info": "One series per GPU: its name, UUID and PCI bus id.",
    "rigforge_gpu_model_as_expected": "1 when the GPU's name holds the profile's gpus.model.",
    "rigforge_gpu_pcie_link_gen_current": "PCIe generation the link runs at now (an idle GPU trains down).",
    "rigforge_gpu_pcie_link_gen_max": "Highest PCIe generation card and slot agree on (wiring, risers).",
    "rigforge_gpu_pcie_link_gen_expected": "The profile's gpus.pcie_gen.",
    "rigforge_gpu_pcie_link_width_current": "PCIe lanes the link runs at now.",
    "rigforge_gpu_pcie_link_width_max": "Most PCIe lanes card and slot agree on.",
    "rigforge_gpu_pcie_link_width_expected": "The profile's gpus.pcie_width.",
    "rigforge_gpu_power_limit_watts": "The GPU's power limit.",
    "rigforge_gpu_power_limit_expected_watts": "The profile's gpus.power_limit_w.",
    "rigforge_gpu_power_draw_watts": "The GPU's power draw.",
    "rigforge_gpu_temperature_celsius": "The GPU's core temperature.",
    "rigforge_gpu_memory_temperature_celsius": "The GPU's memory (HBM) temperature, where reported.",
    "rigforge_gpu_temperature_margin_celsius": "Degrees left before the GPU's own thermal limit (nvidia-smi's "
                                               "T.Limit; slowdown begins near 0).",
    "rigforge_gpu_persistence_mode": "1 when persistence mode is on.",
    "rigforge_gpu_persistence_mode_expected": "The profile's gpus.persistence_mode.",
    "rigforge_gpu_clock_hertz": "The GPU's clock now (clock: sm, memory).",
    "rigforge_gpu_clock_max_hertz": "The GPU's highest clock (clock: sm, memory).",
    "rigforge_gpu_utilization_ratio": "Share of the last sample period a kernel ran on the GPU (0-1).",
    "rigforge_gpu_memory_utilization_ratio": "Share of the last sample period memory was read or written (0-1).",
    "rigforge_gpu_memory_used_bytes": "GPU memory allocated by active contexts.",
    "rigforge_gpu_memory_total_bytes": "The GPU's memory.",
    "rigforge_gpu_clocks_event_reason_active": "1 while the reason (nvidia-smi's clocks_event_reasons) holds the "
                                               "clocks down.",
    "rigforge_gpu_clocks_event_seconds_total": "Seconds the reason held the clocks down since the driver loaded.",
    "rigforge_gpu_ecc_errors_total": "ECC errors since the driver loaded (type: corrected, uncorrected), where "
                                     "reported.",
    "rigforge_gpu_retired_pages_pending": "1 when a page retirement waits for a reboot (cards that retire pages; "
                                          "H200 and Blackwell remap rows instead).",
    "rigforge_gpu_remapped_rows_total": "Memory rows the GPU remapped in its life (cause: correctable, "
                                        "uncorrectable).",
    "rigforge_gpu_remapped_rows_pending": "1 when a row remapping waits for the GPU's reset.",
    "rigforge_gpu_remapped_rows_failure": "1 when a row remapping failed in the GPU's life (no spare rows left).",
    "rigforge_gpu_xid_errors_total": "Xid lines of the GPU in the kernel log since boot, per code.",
    "rigforge_gpu_xid_last_timestamp_seconds": "When the GPU's last Xid of that code was logged (unix seconds).",
    "rigforge_gpu_pcie_replays_total": "PCIe replays since the GPU's reset (nvidia-smi's Replays Since Reset).",
    "rigforge_gpu_pcie_replay_rollovers_total": "Times the GPU's replay counter rolled over.",
    "rigforge_gpu_pcie_aer_errors_total": "AER errors the kernel counted on the GPU's link (link_end: gpu, "
                                          "upstream; aer_severity: correctable, nonfatal, fatal).",
    "rigforge_nvidia_driver_present": "1 when an NVIDIA kernel module or user-space driver is installed.",
    "rigforge_nvidia_driver_info": "The loaded kernel module's and the installed user-space driver's versions.",
    "rigforge_driver_reboot_pending": "1 when the user-space driver is not the loaded module (reboot pending).",
    "rigforge_known_failure_lines_total": "Log lines of each known failure since boot (kernel, engine, bench).",
    "rigforge_engine_unit_active": "1 when the engine's systemd unit is active.",
    "rigforge_engine_up": "1 when the engine's unit is active and its health endpoint answers 200.",
    "rigforge_engine_restarts_total": "Automatic restarts systemd made of the engine's unit (NRestarts).",
    "rigforge_engine_started_timestamp_seconds": "When the engine's unit last became active (unix seconds).",
    "rigforge_engine_health_timeout_seconds": "Seconds a start may take to answer healthy (engine.health_timeout_s).",
    "rigforge_bench_present": "1 when the rig holds a smoke bench result.",
    "rigforge_bench_timestamp_seconds": "When the last smoke bench finished (unix seconds).",
    "rigforge_bench_primary_value": "The last smoke bench's primary metric (bench.primary), its cell's median.",
    "rigforge_bench_primary_floor": "The profile's floor for that metric and cell.",
    "rigforge_measured_change_cannot_tell": "1 when the rig's last measured driver or engine change could not tell "
                                            "at its tolerance (its rollout stopped, or went on by the owner's switch).",
    "rigforge_unrecognised_error_lines_total": "Error-level log lines no known-failure signature claims, by log.",
    "rigforge_disk_info": "The mount point holding each watched path (join node_filesystem_* on mountpoint).",
}
