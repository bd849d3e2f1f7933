"""The protocol documents' example messages decode to the meaning the documents give them (tests/conformance.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conformance import (
    CITED,
    SPEC,
    Fixture,
    cite,
    cited_sections,
    file_content,
    load_fixtures,
    mismatches,
    raw_message,
    registering,
)
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.schema_cache.protocols import create_decoder, protocol_options

FIXTURES = load_fixtures()
PROTOCOLS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "protocols.md"


def _params():
    for fixture in FIXTURES:
        marks = [pytest.mark.xfail(reason=fixture.xfail, strict=True, raises=AssertionError)] if fixture.xfail else []
        yield pytest.param(fixture, "registry", id=fixture.name, marks=marks)
        if fixture.protocol == "avro":
            # The same example with its schemas in a real registry server (Apicurio Registry): end to end.
            real = [*marks, pytest.mark.e2e, pytest.mark.conformance]
            yield pytest.param(fixture, "apicurio", id=f"{fixture.name}@apicurio", marks=real)


def _decoder(fixture: Fixture, tmp_path: Path, registry_url: str | None):
    files = tmp_path / "files"
    files.mkdir()
    for name, content in fixture.files.items():
        (files / name).write_text(json.dumps(file_content(content)))
    options = {k: (v.replace("{files}", str(files)) if isinstance(v, str) else v) for k, v in fixture.options.items()}
    extra = {}
    if fixture.protocol == "avro":
        from ticdc_delta.schema_cache.ticdc_avro.options import RegistryOptions

        extra["registry"] = RegistryOptions(url=registry_url or "", max_wait_seconds=2)
    return create_decoder(protocol_options(fixture.protocol, options, **extra))


@pytest.mark.parametrize("fixture, registry_server", list(_params()))
def test_documented_example_decodes_to_its_documented_meaning(fixture: Fixture, registry_server: str, tmp_path, request):
    # Setup: the example's messages (and the ones the document says come before it) in order; avro
    # schemas registered in the registry emulator, and again in Apicurio Registry.
    # Expect: each step's events (or typed error) as the document describes them.
    url = request.getfixturevalue(registry_server).url if fixture.protocol == "avro" else None
    decoder = _decoder(fixture, tmp_path, url)
    register = registering(url) if url else None
    for offset, step in enumerate(fixture.steps):
        message = raw_message(step, offset, register)
        wanted = step["expect"]
        if wanted and wanted[0].get("event") == "error":
            with pytest.raises(DecodeError) as failure:
                decoder.decode(message)
            assert wanted[0]["says"] in str(failure.value), f"step {offset} ({step.get('why', '')})"
            continue
        try:
            events = decoder.decode(message)
        except DecodeError as err:
            raise AssertionError(f"step {offset} ({step.get('why', '')}): refused: {err}") from err
        found = mismatches(events, wanted)
        assert found == [], f"step {offset} ({step.get('why', '')}):\n" + "\n".join(found)


def test_every_fixture_names_a_document_and_a_section_that_exist():
    # Expect: each fixture's document and section heading are among the cited passages the repository carries
    # (tests/fixtures/conformance/cited.json), and that copy holds no passage no fixture cites.
    assert FIXTURES, "no conformance fixtures found"
    cited = json.loads(CITED.read_text())
    for fixture in FIXTURES:
        document, heading = cited_sections(fixture)
        assert heading in cited.get(document, {}), f"{fixture.name}: section {fixture.where!r} of {document} is not cited"
        assert cited[document][heading].startswith(heading)
    assert {(d, h) for d, sections in cited.items() for h in sections} == {cited_sections(f) for f in FIXTURES}


@pytest.mark.skipif(not SPEC.is_dir(), reason=f"the protocol documents ({SPEC}) are not beside this clone: the cited "
                    "passages are checked against the repository's copy only (test above)")
def test_the_cited_passages_are_the_documents_own_text():
    # Expect: the repository's copy of each cited passage is the document's text at that heading
    # (`python -m tests.conformance` refreshes the copy after the documents change).
    assert json.loads(CITED.read_text()) == cite(SPEC, FIXTURES)


def test_the_readme_lists_every_fixture_with_its_outcome():
    # Expect: the protocols page's conformance table (docs/protocols.md) has one row per fixture, saying pass or xfail as the fixture does.
    rows = dict(re.findall(r"^\| `([\w-]+/[\w-]+)` \|[^|]*\|[^|]*\| (pass|xfail)\b", PROTOCOLS_PAGE.read_text(), re.M))
    assert rows == {f.name: ("xfail" if f.xfail else "pass") for f in FIXTURES}
