"""Read-only: the known failures in each host's kernel log and engine journal (use ``python -m rigforge.doctor``).

    pyinfra -y inventory/rig2x.py deploys/doctor.py                    # since boot / the engine's last start
    pyinfra -y inventory/rig2x.py deploys/doctor.py --data since=-2h   # a window (journalctl --since)

Prints one ``rigforge-doctor {json}`` line per host; ``python -m rigforge.doctor`` runs this and prints
the fleet table. No lock is taken and nothing is written: it can run beside a deploy.
"""

from roles import doctor

doctor.apply_doctor()
