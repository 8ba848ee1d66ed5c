"""Examples of guard/evidence's parsers and sentences, each run in its module's namespace as
the doctests they were (guard/ holds the program, tests/ its examples)."""

from __future__ import annotations

import doctest
import importlib

import pytest

EXAMPLES = {
    "guard.evidence.aer.severity_word": """\
>>> severity_word("Uncorrected (Non-Fatal)"), severity_word("Correctable")
('uncorrectable-nonfatal', 'correctable')
""",
    "guard.evidence.aer.parse_aer_line": """\
>>> parse_aer_line("pcieport 0000:00:03.0:    [ 5] SDES                  ", 1).surprise_down
True
>>> line = "pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: id=0010"
>>> e = parse_aer_line(line, 2)
>>> e.device, e.detail, e.source
('0000:00:02.0', 'uncorrectable-fatal', 'id=0010')
""",
    "guard.evidence.aer.parse_counters": """\
>>> parse_counters("Undefined 0\\nDLP 0\\nSDES 1\\nTOTAL_ERR_FATAL 1\\n")
{'Undefined': 0, 'DLP': 0, 'SDES': 1, 'TOTAL_ERR_FATAL': 1}
>>> parse_counters("3\\n")
{'TOTAL': 3}
""",
    "guard.evidence.aer.counters_surprise_down": """\
>>> counters_surprise_down({"aer_dev_fatal": {"SDES": 1}})
True
""",
    "guard.evidence.assess.lspci_blocks": """\
>>> lspci_blocks("x\\n97:01.0 PCI bridge: Intel\\n\\tDevSta:\\tCorrErr-\\nnext line")
{'0000:97:01.0': '97:01.0 PCI bridge: Intel\\n\\tDevSta:\\tCorrErr-'}
""",
    "guard.evidence.collect.empty_journal": """\
>>> empty_journal("", "No journal files were found.\\n")
'no journal (No journal files were found.)'
>>> empty_journal("-- No entries --\\n", "")
'no kernel lines in the journal'
>>> empty_journal("2026-01-01T00:00:00+0000 host kernel: Linux version 6.1\\n", "")
''
""",
    "guard.evidence.kernel_log.pci_or_none": """\
>>> pci_or_none("PCI:0000:9B:00"), pci_or_none("0003:00")
('0000:9b:00.0', None)
""",
    "guard.evidence.kernel_log.parse_xid": """\
>>> r = parse_xid("[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', "
...               "name=<unknown>, GPU has fallen off the bus.")
>>> (r.code, r.pci, r.time, r.pid, r.process, r.message)
(79, '0000:91:00.0', '6781741.548779', None, None, 'GPU has fallen off the bus.')
>>> r = parse_xid("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: SM (0x1).")
>>> (r.code, r.pci, r.mig, r.pid)
(94, '0000:01:00.0', 'GPU-I:05', 7194)
>>> parse_xid("NVRM: Xid (0000:01:00): 13, Graphics Exception").pci
'0000:01:00.0'
>>> parse_xid("NVRM: Xid (PCI:0008:01:00): 45, pid=9, name=a, Ch 00000001 caused by "
...           "previous Xid 149").caused_by
149
>>> parse_xid("NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 "
...           "(None) to 0x7 (Unknown)").recovery
RecoveryChange(old=0, new=7, new_text='System Reboot')
>>> parse_xid("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal") is None
True
""",
    "guard.evidence.kernel_log.parse_dead": """\
    >>> parse_dead("[ 903.6] NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)")
    DeadRecord(kind='init-failed', pci='0000:98:00.0', time='903.6', line=0, \
text='NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)')
    >>> parse_dead("NVRM: GPU0 _kgspRpcRecvPoll: GSP RM heartbeat timed out").pci is None
    True
""",
    "guard.evidence.kernel_log.parse_kernel_log": """\
>>> log = parse_kernel_log(
...     "[ 9.1] NVRM: The NVIDIA GPU 0000:01:00.0\\n"
...     "        NVRM: (PCI ID: 10de:2330) installed in this system has\\n"
...     "        NVRM: fallen off the bus and is not responding to commands.\\n")
>>> log.fallen_off
(FallenOff(pci='0000:01:00.0', time='9.1', line=1, form='probe'),)
""",
    "guard.evidence.kernel_log.lines_of": """\
>>> list(lines_of("a\\r\\nb\\n\\nc"))
['a', 'b', '', 'c']
""",
    "guard.evidence.kernel_log.KernelLogScan": """\
>>> scan = KernelLogScan()
>>> for n in range(1, 1001):
...     scan.add(n, f"[{n}.0] NVRM: Xid (PCI:0000:01:00): 13, pid={n}, name=a, Graphics")
>>> log = scan.result()
>>> len(log.xids), log.dropped, log.totals[0].count, log.totals[0].last_time
(200, 800, 1000, '1000.0')
""",
    "guard.evidence.kernel_log.same_gpu": """\
>>> same_gpu("0000:99:00.0", "0000:99:00.1"), same_gpu(None, "0000:99:00.0")
(True, False)
""",
    "guard.evidence.ledger_cli.data_of": """\
>>> data_of({"kind": "ConfigMap", "data": {"gpu-node-b": "x"}}, "f")
{'gpu-node-b': 'x'}
>>> data_of({"kind": "ConfigMap", "data": None}, "f")
{}
>>> data_of(["a"], "f")
Traceback (most recent call last):
...
guard.evidence.ledger_cli.LedgerSourceError: f: not a ConfigMap or a node: text mapping
""",
    "guard.evidence.ledger_cli.next_incident": """\
>>> next_incident(fault_ledger.Counts(2, 2, None))
Counts(same_card=3, same_slot=3, last_card_incident=None)
""",
    "guard.evidence.links.speed": """\
>>> speed("32.0 GT/s PCIe"), speed("2.5 GT/s PCIe"), speed("8.0 GT/s"), speed("Unknown")
('32', '2.5', '8', None)
""",
    "guard.evidence.links.width": """\
>>> width("16"), width("0"), width("x16"), width(None)
(16, None, None, None)
""",
    "guard.evidence.lspci.config_space": """\
    >>> config_space("99:00.0 3D controller: NVIDIA Device 2330 (rev ff) (prog-if ff)\\n"
    ...              "\\t!!! Unknown header type 7f\\n00: ff ff ff ff\\n")
    ConfigSpace(all_ff=True, bytes_read=4, vendor_device=None, header='99:00.0 3D controller: \
NVIDIA Device 2330 (rev ff) (prog-if ff)')
    >>> config_space("99:00.0 3D controller: NVIDIA (rev a1)\\n00: de 10 30 23 47 05\\n").all_ff
    False
    >>> config_space("").all_ff is None
    True
    >>> two = "18:00.0 3D (rev a1)\\n00: de 10\\n\\n2a:00.0 3D (rev ff)\\n00: ff ff\\n"
    >>> config_space(two, "0000:18:00.0").all_ff, config_space(two, "0000:2a:00.0").all_ff
    (False, True)
    >>> config_space(two, "0000:99:00.0").all_ff is None
    True
""",
    "guard.evidence.lspci.port_status": """\
>>> s = port_status("00:03.0 PCI bridge: Intel Root Port\\n"
...                 "\\tCapabilities: [148 v1] Advanced Error Reporting\\n"
...                 "\\t\\tUESta:\\tDLP- SDES+ TLP- FCP- CmpltTO+\\n"
...                 "\\t\\t\\tECRC- UnsupReq+ ACSViol-\\n"
...                 "\\t\\tCESta:\\tRxErr- BadTLP-\\n")
>>> s.uncorrectable, s.surprise_down, s.has_aer
(('CmpltTO', 'SDES', 'UnsupReq'), True, True)
""",
    "guard.evidence.lspci.pcie_links": """\
>>> (l,) = pcie_links("18:00.0 3D controller: NVIDIA (rev a1)\\n"
...                   "  LnkCap: Port #0, Speed 32GT/s, Width x16, ASPM not supported\\n"
...                   "  LnkSta: Speed 16GT/s (downgraded), Width x8 (downgraded)\\n")
>>> (l.pci, l.cap_speed, l.speed, l.cap_width, l.width, l.width_downgraded)
('0000:18:00.0', 32.0, 16.0, 16, 8, True)
""",
    "guard.evidence.nvidia_smi.parse_smi": """\
>>> out = parse_smi("GPU 00000000:10:1C.0\\n    GPU UUID : GPU-2b41\\n"
...                 "    Remapped Rows\\n        Pending : Yes\\n")
>>> gpu = out["0000:10:1c.0"]
>>> gpu.uuid, gpu.fields[("Remapped Rows", "Pending")], [f.verdict for f in gpu.findings()]
('GPU-2b41', 'Yes', [<Repair.RESET: 'reset'>])
""",
    "guard.evidence.prefix.line_time": """\
>>> line_time("kern  :warn  : 2025-01-21T04:41:44,283302+00:00 ")
'2025-01-21T04:41:44,283302+00:00'
>>> line_time("[Sun Feb 23 16:24:18 2025] ")
'Sun Feb 23 16:24:18 2025'
>>> line_time("Dec  2 10:43:35 worker4 kernel: [240314.528856] ")
'Dec 2 10:43:35'
>>> line_time("6月 28 02:52:53 jjf-Super-Server kernel: ")
'6月 28 02:52:53'
>>> line_time("[ 130.456250] [ T1946] ")
'130.456250'
>>> line_time("kernel: ") is None
True
""",
    "guard.evidence.report.link_sentence": """\
>>> link_sentence(PcieLink("0000:18:00.0", "", 32.0, 16, 32.0, 8))
'0000:18:00.0: LnkSta 32GT/s x8 of LnkCap 32GT/s x16: width DOWNGRADED'
""",
    "guard.evidence.report.config_sentence": """\
>>> from guard.evidence.lspci import config_space
>>> from guard.evidence.assess import Inputs, assess
>>> from guard.xid_tables import XidClasses
>>> a = assess(Inputs("", "-", gpu_lspci="00: ff ff ff ff"), "0000:99:00.0", XidClasses({}))
>>> config_sentence(a)
'PCI config space reads all ff (4 bytes): the GPU does not answer config reads.'
""",
    "guard.evidence.report._event_sentence": """\
>>> event = aer.AerEvent("0000:00:03.0", "received", "1.5", "correctable", 1, "id=0010")
>>> _event_sentence(event)
'kernel 1.5 0000:00:03.0: correctable error received from id=0010'
""",
    "guard.evidence.verdict.decide": """\
>>> classes = XidClasses({79: Repair.POWER_CYCLE, 48: Repair.RESET, 143: Repair.RMA})
>>> decide([48], False, True, classes)
Decision(verdict=<Repair.POWER_CYCLE: 'power-cycle'>, reasons=('config space reads all ff',))
>>> decide([48, 143], False, False, classes).verdict.value
'rma'
>>> decide([154], False, False, classes).verdict.value
'human'
>>> decide([154], False, False, classes, [Finding(Repair.RESET, "Xid 154: Drain and Reset")])
Decision(verdict=<Repair.RESET: 'reset'>, reasons=('Xid 154: Drain and Reset',))
""",
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_holds(name: str) -> None:
    module = importlib.import_module(name.rsplit(".", 1)[0])
    test = doctest.DocTestParser().get_doctest(EXAMPLES[name], dict(vars(module)), name, None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test, out=print)
    assert (runner.failures, runner.tries > 0) == (0, True)
