"""scripts/app.py and vaswani.serving.app / demo_tasks, the web demo of the shipped models: started once on a free
local port, it is used in a real browser (Debian's headless Chromium, driven by Selenium through chromedriver) and
through gradio_client, and every answer is the package's pipeline's for the same text; bad input is answered in the
page; a folder that is not a model of this project is refused in one line before anything loads."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from helpers import REPO, command_in_process, free_port, start_app, stop_app, tiny_config
from vaswani import VaswaniModel, pipelines
from vaswani.serving.attention_map import DPI, attention_of_translation, heatmap_size
from vaswani.serving.app import EXAMPLES, parse_arguments


APP = REPO / "scripts" / "app.py"
RESULTS = REPO / "results"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
INSTALL_DEMO = "install the demo extra: pip install -e '.[demo]'"
INSTALL_BROWSER = "apt-get install chromium chromium-driver (Debian's headless browser and its WebDriver)"
ANSWER_SECONDS = 60  # one answer in the page

SENTENCE = "A man in an orange hat is looking at a dog."  # typed into the en->de tab


# --- what the page must show: the pipelines' answers, computed here ---------------------------------------------------


def reference(name: str, auto_class, task: str, **options):
    folder = RESULTS / name / "model"
    model = auto_class.from_pretrained(folder).eval()
    return pipelines.pipeline(task, model=model, tokenizer=AutoTokenizer.from_pretrained(folder), **options)


@pytest.fixture(scope="module")
def expected():
    """The shipped models' pipelines (the README's calls, generate's own loop) on the texts the tests send."""
    en_de = reference("multi30k_en_de", AutoModelForSeq2SeqLM, "translation")
    en_de.model.set_attn_implementation("eager")
    de_en = reference("multi30k_de_en", AutoModelForSeq2SeqLM, "translation")
    summarizer = reference("samsum", AutoModelForSeq2SeqLM, "summarization")
    classifier = reference("sst2", AutoModelForSequenceClassification, "text-classification")
    tagger = reference("conll2003", AutoModelForTokenClassification, "token-classification",
                       aggregation_strategy="first")
    (translation,) = en_de([SENTENCE], return_tensors=True, return_text=True)
    attention = attention_of_translation(en_de.model, en_de.tokenizer, SENTENCE, translation["translation_token_ids"])
    width, height = heatmap_size(attention)  # inches
    review, long_review = EXAMPLES["text-classification"][0], "The plot is thin and the jokes fall flat. " * 12
    news = EXAMPLES["token-classification"][0]
    return {
        "translation": translation["translation_text"],
        "heatmap_pixels": (width * DPI, height * DPI),
        "de_en": de_en(EXAMPLES["translation:de"][0])[0]["translation_text"],
        "summary": summarizer(EXAMPLES["summarization"][0])[0]["summary_text"],
        "label": classifier(review)[0],
        "scores": {score["label"]: score["score"] for score in classifier(review, top_k=None)},
        "entities": [(entity["entity_group"], entity["start"], entity["end"], news[entity["start"]:entity["end"]])
                     for entity in tagger(news)],
        "news": news,
        "long_review": long_review,
        "long_review_tokens": len(classifier.tokenizer(long_review, verbose=False)["input_ids"]),
    }


# --- the server, the browser, the API client --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("gradio", reason=f"the web demo needs gradio: {INSTALL_DEMO}")
    log = tmp_path_factory.mktemp("app") / "app.log"
    process, url = start_app([sys.executable, str(APP), "--port", str(free_port())], REPO, log)
    SERVER_LOG["path"] = log
    yield url
    stop_app(process)


SERVER_LOG = {}  # "path": the running demo's output (stdout and stderr)


@pytest.fixture(scope="module")
def browser(server):
    """One headless Chromium session for every check of the page, on the page loaded once."""
    webdriver = pytest.importorskip("selenium.webdriver", reason=f"the browser tests need selenium: {INSTALL_DEMO}")
    for program in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(program):
            pytest.skip(f"{program} is missing: {INSTALL_BROWSER}")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(server)
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def client(server):
    gradio_client = pytest.importorskip("gradio_client", reason=f"the API tests need gradio_client: {INSTALL_DEMO}")
    return gradio_client.Client(server, verbose=False)


def wait_for(driver, condition, seconds: float = ANSWER_SECONDS):
    """`condition(driver)`'s first truthy value, polled until the deadline (the test fails with what it waited for)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, ignored_exceptions=[StaleElementReferenceException]).until(condition)


def element(driver, selector: str):
    from selenium.webdriver.common.by import By

    return wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector))


def open_tab(driver, key: str) -> None:
    element(driver, f"#{key}-tab-button").click()
    wait_for(driver, lambda d: element(d, f"#{key}-run").is_displayed())


def replace_text(driver, key: str, text: str) -> None:
    """Type `text` into the tab's box as a person does (select all, type over it; typing fires the page's events,
    where setting the value would not)."""
    from selenium.webdriver.common.keys import Keys

    box = element(driver, f"#{key}-input textarea")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    if text:
        box.send_keys(text)
    wait_for(driver, lambda d: box.get_attribute("value") == text)


def run(driver, key: str) -> None:
    element(driver, f"#{key}-run").click()


def output_text(driver, key: str, previous: str = "") -> str:
    return wait_for(driver, lambda d: (value := element(d, f"#{key}-output textarea").get_attribute("value"))
                    and value != previous and value)


def toast(driver, kind: str) -> str:
    """The text of the page's newest notice of `kind` ("error", "warning")."""
    from selenium.webdriver.common.by import By

    def newest(d):
        texts = [text.get_attribute("textContent").strip()
                 for text in d.find_elements(By.CSS_SELECTOR, f".toast-body.{kind} [data-testid='toast-text']")]
        return texts[-1] if texts and texts[-1] else None

    return wait_for(driver, newest)


def close_toasts(driver) -> None:
    from selenium.webdriver.common.by import By

    for button in driver.find_elements(By.CSS_SELECTOR, ".toast-close"):
        if button.is_displayed():
            button.click()
    wait_for(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, ".toast-body"))


# --- in the browser ---------------------------------------------------------------------------------------------------


def test_a_typed_sentence_is_translated_with_its_heatmap_beside_it(browser, expected):
    open_tab(browser, "translate_en_de")
    replace_text(browser, "translate_en_de", SENTENCE)
    run(browser, "translate_en_de")
    assert output_text(browser, "translate_en_de") == expected["translation"]
    image = element(browser, "#translate_en_de-heatmap img")
    # the picture of this translation: its size follows the number of source and target tokens
    size = wait_for(browser, lambda d: d.execute_script(
        "const i = arguments[0]; return i.complete && i.naturalWidth ? [i.naturalWidth, i.naturalHeight] : null;",
        image))
    assert size == pytest.approx(expected["heatmap_pixels"], abs=1)  # (matplotlib rounds to whole pixels)


def test_each_tab_runs_its_prefilled_example_in_one_click(browser, expected):
    open_tab(browser, "translate_de_en")
    run(browser, "translate_de_en")
    assert output_text(browser, "translate_de_en") == expected["de_en"]

    open_tab(browser, "summarize")
    run(browser, "summarize")
    assert output_text(browser, "summarize") == expected["summary"]

    open_tab(browser, "classify")
    run(browser, "classify")
    label = wait_for(browser, lambda d: element(d, "#classify-output [data-testid='label-output-value']").text)
    assert label == expected["label"]["label"]
    shown = {
        meter.get_attribute("aria-label"): float(meter.get_attribute("value"))
        for meter in browser.find_elements("css selector", "#classify-output meter")
    }
    assert shown == pytest.approx(expected["scores"], abs=1e-5)

    open_tab(browser, "tag")
    run(browser, "tag")
    highlighted = wait_for(browser, lambda d: d.find_elements("css selector", "#tag-output .token.highlighted"))
    spans = browser.execute_script(
        """return Array.from(document.querySelectorAll('#tag-output .token')).map(token => [
               token.querySelector('.text').textContent,
               token.classList.contains('highlighted'),
               token.querySelector('.label') ? token.querySelector('.label').textContent.trim() : null]);""")
    # the spans cover the text exactly, in order; the highlighted ones are the pipeline's entities with their labels
    assert "".join(text for text, _, _ in spans) == expected["news"]
    found, position = [], 0
    for text, is_entity, label in spans:
        if is_entity:
            found.append((label, position, position + len(text), text))
        position += len(text)
    assert len(highlighted) == len(expected["entities"])
    assert found == expected["entities"]


def test_an_empty_text_and_a_long_one_get_a_message_in_the_page(browser, expected):
    open_tab(browser, "classify")
    replace_text(browser, "classify", "")
    run(browser, "classify")
    assert toast(browser, "error") == "The text is empty: type a text to classify."
    close_toasts(browser)

    replace_text(browser, "classify", expected["long_review"])
    run(browser, "classify")
    assert toast(browser, "warning") == (
        f"The text is {expected['long_review_tokens']} tokens long and the model reads at most 64: it was truncated "
        "to its first 64 tokens, as the pipeline does, and the rest was not read."
    )
    assert "Traceback" not in browser.page_source
    close_toasts(browser)


# --- through the API --------------------------------------------------------------------------------------------------


def test_the_api_gives_the_pipelines_answers(client, expected):
    translation, picture = client.predict(SENTENCE, api_name="/translate_en_de")
    assert translation == expected["translation"]
    from PIL import Image

    with Image.open(picture) as image:
        assert image.size == pytest.approx(expected["heatmap_pixels"], abs=1)
    assert client.predict(EXAMPLES["summarization"][0], api_name="/summarize") == expected["summary"]
    label = client.predict(EXAMPLES["text-classification"][0], api_name="/classify")
    assert label["label"] == expected["label"]["label"]
    assert {c["label"]: c["confidence"] for c in label["confidences"]} == pytest.approx(expected["scores"], abs=1e-6)
    highlighted, entities = client.predict(expected["news"], api_name="/tag")
    assert [(e["entity_group"], e["start"], e["end"], e["word"]) for e in entities] == expected["entities"]
    spans, position = [], 0
    for token in highlighted:
        if token["class_or_confidence"]:
            spans.append((token["class_or_confidence"], position, position + len(token["token"]), token["token"]))
        position += len(token["token"])
    assert spans == expected["entities"]


def test_the_api_refuses_a_text_beyond_the_bounds_with_the_message(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="The text is empty: type a sentence in English to translate"):
        client.predict("   ", api_name="/translate_en_de")
    with pytest.raises(AppError, match="5,001 characters; this demo takes at most 5,000"):
        client.predict("x" * 5001, api_name="/classify")
    with pytest.raises(AppError, match="9 sentences \\(lines\\); this demo translates at most 8"):
        client.predict("A dog runs.\n" * 9, api_name="/translate_en_de")


def test_a_refused_text_leaves_no_traceback_in_the_servers_log(client):
    """Every refused text logged a full traceback (Gradio prints one for each gr.Error unless told not to)."""
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="The text is empty"):
        client.predict("   ", api_name="/classify")
    log = SERVER_LOG["path"].read_text(errors="replace")
    assert "Traceback" not in log and "InputError" not in log, log[-3000:]


def test_a_request_body_over_the_limit_is_answered_413_before_it_is_read(server):
    """The demo read a 100 MB request body into memory before the length check of its text."""
    import http.client
    from urllib.parse import urlparse

    from vaswani.serving.app import MAX_REQUEST_BYTES

    address = urlparse(server)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    connection.putrequest("POST", "/gradio_api/call/classify")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(100 * 2**20))
    connection.endheaders()
    connection.send(b'{"data": ["' + b"x" * 1000)  # the rest never comes: the answer must not wait for it
    response = connection.getresponse()
    assert response.status == 413
    assert f"larger than the {MAX_REQUEST_BYTES:,} bytes this demo reads" in response.read().decode()
    connection.close()
    # an ordinary request is still answered
    gradio_client = pytest.importorskip("gradio_client")
    assert gradio_client.Client(server, verbose=False).predict(EXAMPLES["text-classification"][0],
                                                               api_name="/classify")


def test_the_size_limit_counts_a_body_sent_without_its_length():
    """A body streamed in chunks (no Content-Length) is cut off at the limit, and answered 413."""
    import asyncio

    from vaswani.serving.app import RequestSizeLimit

    read, sent = [], []

    async def application(scope, receive, send):
        while (message := await receive())["more_body"]:
            read.append(len(message["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})

    chunks = iter([{"type": "http.request", "body": b"x" * 600, "more_body": True}] * 10)

    async def receive():
        return next(chunks)

    async def send(message):
        sent.append(message)

    asyncio.run(RequestSizeLimit(application, limit=1000)({"type": "http", "headers": []}, receive, send))
    assert read == [600] and sent[0]["status"] == 413


# --- the command line: a folder that is not a model of this project ---------------------------------------------------


def bare_checkpoint(folder: Path, tokenizer) -> Path:
    VaswaniModel(tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("case", ["missing", "empty", "other_project", "bare_model", "no_tokenizer", "port"])
def test_a_folder_that_is_not_a_checkpoint_is_refused_in_one_line(case, tmp_path, tokenizer):
    folder = tmp_path / "model"
    arguments = ["--model", folder]
    if case == "empty":
        folder.mkdir()
    elif case == "other_project":
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    elif case in ("bare_model", "no_tokenizer"):
        bare_checkpoint(folder, tokenizer)
        if case == "no_tokenizer":
            (folder / "tokenizer.json").unlink()
    elif case == "port":
        arguments = ["--model", bare_checkpoint(folder, tokenizer), "--port", "70000"]
    result = command_in_process(APP, arguments)
    message = {
        "missing": f"--model {folder}: no such folder; give a model folder of this project.",
        "empty": f"--model {folder} is not a model folder: it has no config.json.",
        "other_project": f"--model {folder} holds a 'bert' model, not a model of this project (model_type "
                         "'vaswani').",
        "bare_model": f"--model {folder}: config.json names the model class 'VaswaniModel', which serves none of this "
                      "project's tasks; the task heads are VaswaniForConditionalGeneration, "
                      "VaswaniForSequenceClassification, VaswaniForTokenClassification.",
        "no_tokenizer": f"{folder} has tokenizer_config.json but no tokenizer.json, which holds the tokenizer itself: "
                        "copy it from where the model was saved.",
        "port": "--port must be a whole number >= 1 and <= 65535; got 70000.",
    }[case]
    assert (result.returncode, result.stderr, result.stdout) == (1, f"app.py: error: {message}\n", "")


def test_it_listens_on_this_machine_only_unless_told(monkeypatch):
    """127.0.0.1 by default; --host, or Gradio's GRADIO_SERVER_NAME (which a Space sets to 0.0.0.0), say otherwise."""
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    assert (parse_arguments([]).host, parse_arguments([]).port) == ("127.0.0.1", 7860)
    assert parse_arguments(["--host", "0.0.0.0"]).host == "0.0.0.0"
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7861")
    assert (parse_arguments([]).host, parse_arguments([]).port) == ("0.0.0.0", 7861)
    assert parse_arguments(["--host", "127.0.0.1"]).host == "127.0.0.1"
    monkeypatch.setenv("GRADIO_SERVER_PORT", "http")
    with pytest.raises(ValueError, match="GRADIO_SERVER_PORT='http' is not a port number: set it to one, or give"):
        parse_arguments([])
