"""ONNX's own domain has one home (ampconfig/domains.py): both spellings mean it everywhere, and no other module
spells it out."""

from __future__ import annotations

import ast
from pathlib import Path

import onnx_ir as ir
from onnx import helper as oh

import ampconfig
from ampconfig.decide.facts import is_onnx_op
from ampconfig.domains import DEFAULT_DOMAINS, ONNX_DOMAIN, canonical_domain, is_default_domain
from ampconfig.opinfo.library import op_key
from ampconfig.opinfo.schema import default_opset


def test_both_spellings_are_onnx_s_own_domain() -> None:
    assert {"", ONNX_DOMAIN} == DEFAULT_DOMAINS
    assert is_default_domain("") and is_default_domain("ai.onnx") and is_default_domain(None)
    assert not is_default_domain("com.microsoft")
    assert canonical_domain("ai.onnx") == canonical_domain("") == ""
    assert canonical_domain("com.microsoft") == "com.microsoft"
    assert op_key("ai.onnx", "Relu") == "Relu" and op_key("com.microsoft", "FastGelu") == "com.microsoft::FastGelu"
    assert default_opset({"ai.onnx": 17}, "") == default_opset({"": 17}, "ai.onnx") == 17
    cast = ir.serde.deserialize_node(oh.make_node("Cast", ["x"], ["y"], to=10, domain="ai.onnx"))
    custom = ir.serde.deserialize_node(oh.make_node("Cast", ["x"], ["y"], domain="my.ops"))
    assert is_onnx_op(cast, "Cast") and not is_onnx_op(custom, "Cast")


def test_no_module_spells_the_domain_out() -> None:
    package = Path(ampconfig.__file__).parent
    spelled = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "domains.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value == ONNX_DOMAIN:
                spelled.append(f"{path.relative_to(package)}:{node.lineno}")
    assert spelled == []
