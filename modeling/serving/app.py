"""The web demo of the models: a Gradio page with one tab per model (scripts/app.py is its command line, and a Space
staged by `scripts/push_to_hub.py --space` runs it too).

    python scripts/app.py                           # the five shipped models (results/*/model), http://127.0.0.1:7860
    python scripts/app.py --model outputs/my/best   # one model of your own, its task from its config
    python scripts/app.py --host 0.0.0.0 --port 80  # reachable from other machines (default: this machine only)

Each tab holds an example, so one click shows the model at work: a translation with the cross-attention heatmap beside
it (target tokens in rows, source tokens in columns, as scripts/demo.py draws it), a dialogue's summary, a review's
label with every label's score, a text with its entities highlighted (the spans of the token-classification
pipeline, aggregation "first"). What runs behind each tab, and the messages for a text the demo refuses or cuts:
`vaswani.serving.demo_tasks`. Every tab is also an API endpoint (`gradio_client`, or the page's "Use via API" link),
named after its task: `/translate_en_de`, `/summarize`, `/classify`, `/tag`.

Requests wait in Gradio's queue (at most `QUEUE_SIZE`; beyond that a person is told the demo is busy) and run one
at a time: on a CPU one model call already uses every core.
"""

import argparse
import io
import os
from dataclasses import dataclass
from pathlib import Path

from ..cli import Allowed, check_option, run_command
from ..tasks import read_task
from . import demo_tasks
from .demo_tasks import InputError, ServedModel, language


REPO = Path(__file__).resolve().parents[2]  # the checkout: modeling/serving/ is two folders down
SHIPPED_RESULTS = REPO / "results"
QUEUE_SIZE = 32  # requests waiting at once
DEFAULT_HOST = "127.0.0.1"  # this machine only
DEFAULT_PORT = 7860  # Gradio's, and a Space's
PORT = Allowed(integer=True, minimum=1, maximum=65535)


@dataclass(frozen=True)
class Shipped:
    """A model the repository ships (results/NAME/model) and what its tab says about it."""

    name: str
    about: str


SHIPPED = (
    Shipped("multi30k_en_de", "Trained from scratch on Multi30k's 29,000 image captions: it translates short "
                              "descriptions of a scene."),
    Shipped("multi30k_de_en", "Trained from scratch on Multi30k's 29,000 image captions: it translates short "
                              "descriptions of a scene."),
    Shipped("samsum", "Trained from scratch on SAMSum's chat dialogues: one turn a line, 'Name: what they say'. A "
                      "small model: it may mix up who did what."),
    Shipped("sst2", "Trained from scratch on SST-2's movie-review phrases (first to rebuild them, then on their "
                    "labels): positive or negative."),
    Shipped("conll2003", "Trained from scratch on CoNLL-2003's news sentences: persons (PER), organizations (ORG), "
                         "locations (LOC) and other names (MISC). About one entity in five that it finds is wrong."),
)
EXAMPLES = {
    "translation:en": ["A little girl in a pink dress is climbing the stairs.", "Two dogs are playing in the snow.",
                       "A man in a blue shirt is riding a bicycle down the street."],
    "translation:de": ["Ein Mann mit einem orangefarbenen Hut starrt auf etwas.",
                       "Zwei junge Mädchen spielen im Sand am Strand.",
                       "Ein schwarzer Hund rennt durch das hohe Gras."],
    "summarization": [
        "Jeniffer: We're preparing ravioli\nAlois: how nice! nobody makes them better than your family\n"
        "Jeniffer: I got the recipe from my grandmother\nHildegard: it's a real treasure",
        "Kate: Have you seen my keys?\nMark: They're on the kitchen table.\nKate: Thanks!",
    ],
    "text-classification": ["A gripping, beautifully acted film.", "The plot is thin and the jokes fall flat.",
                            "An utterly charming and funny movie with a wonderful cast."],
    "token-classification": [
        "Angela Merkel met Emmanuel Macron in Paris on Tuesday, the European Union said.",
        "Shares of Microsoft rose 3 percent in New York after Bill Gates spoke at the United Nations.",
    ],
}


@dataclass
class Tab:
    """One tab of the page: a served model, what the page says about it, its examples (the first one prefilled)."""

    served: ServedModel
    about: str
    examples: list[str]

    @property
    def key(self) -> str:
        """The tab's API name and the prefix of its elements' ids: translate_en_de, summarize, classify, tag."""
        if self.served.task == "translation":
            return "translate_{}_{}".format(*self.served.direction)
        return {"summarization": "summarize", "text-classification": "classify", "token-classification": "tag"}[
            self.served.task
        ]

    @property
    def title(self) -> str:
        if self.served.task == "translation":
            return "Translate {} → {}".format(*self.served.direction)
        return {"summarization": "Summarize a dialogue", "text-classification": "Classify a review",
                "token-classification": "Tag entities"}[self.served.task]


def examples_for(served: ServedModel) -> list[str]:
    if served.task == "translation":
        return EXAMPLES.get(f"translation:{served.direction[0]}", [])
    return EXAMPLES[served.task]


def describe(served: ServedModel, name: str) -> str:
    """The line under a tab's title: the model, its size, and how it decodes."""
    model = served.model
    line = f"`{name}`: {type(model).__name__}, {model.num_parameters():,} parameters."
    if model.can_generate():
        config = model.generation_config
        search = f"beam search with {config.num_beams} beams" if (config.num_beams or 1) > 1 else "greedy search"
        limit = f", at most {config.max_new_tokens} new tokens" if config.max_new_tokens else ""
        line += f" Decoding: its generation config ({search}{limit})."
    return line


# --- the tabs' functions: the model's answer in the page's components ----------------------------------------------


def _answer(served: ServedModel, text: str):
    """The task's answer; a refused text raises the message in the page (gr.Error), a cut one warns there."""
    import gradio as gr

    try:
        answer = demo_tasks.RUNNERS[served.task](served, text)
    except InputError as error:  # the person's text, not a fault of the server: no traceback in its log
        raise gr.Error(str(error), print_exception=False) from None
    except BaseException as error:  # the tokenizers library's panic (PanicException) would leave the request unanswered
        if type(error).__name__ != "PanicException":
            raise
        raise gr.Error("The model's tokenizer failed on this text; try another one.") from None
    for note in answer.notes:
        gr.Warning(note)
    return answer


def _translate(served: ServedModel):
    from PIL import Image

    from .attention_map import heatmap_png

    def translate(text: str):
        answer = _answer(served, text)
        return "\n".join(answer.texts), Image.open(io.BytesIO(heatmap_png(answer.attention, served.model)))

    return translate


def _summarize(served: ServedModel):
    def summarize(text: str) -> str:
        return _answer(served, text).texts[0]

    return summarize


def _classify(served: ServedModel):
    def classify(text: str) -> dict[str, float]:
        return _answer(served, text).labels

    return classify


def _tag(served: ServedModel):
    def tag(text: str):
        answer = _answer(served, text)
        spans = [{"entity": entity["entity_group"], "start": entity["start"], "end": entity["end"]}
                 for entity in answer.entities]
        return {"text": text, "entities": spans}, answer.entities

    return tag


# --- the page --------------------------------------------------------------------------------------------------------


INTRO = (
    "# The original Transformer, trained from scratch\n"
    "Small models of *Attention Is All You Need* (Vaswani et al., 2017), written as Hugging Face `transformers` "
    "models and trained from scratch, each on one dataset. Each tab runs one model; its box holds an example: press "
    "the button, or type your own text."
)

HEATMAP_CAPTION = (
    "**Where the model looks** while it translates the first line: the cross-attention of its last decoder layer "
    "(mean of the heads), one row per target token it writes, one column per source token."
)


def _add_tab(gr, tab: Tab) -> None:
    served, key = tab.served, tab.key
    placeholder = None
    if served.task == "translation" and not tab.examples:
        placeholder = f"A sentence in {language(served.direction[0])}, one a line"
    with gr.Tab(tab.title, id=key, elem_id=f"{key}-tab"):
        gr.Markdown(tab.about)
        with gr.Row():
            with gr.Column():
                text = gr.Textbox(
                    value=tab.examples[0] if tab.examples else None, label=_input_label(served), lines=_lines(served),
                    max_lines=demo_tasks.MAX_LINES, max_length=demo_tasks.MAX_CHARACTERS, placeholder=placeholder,
                    elem_id=f"{key}-input",
                )
                button = gr.Button(_button_label(served), variant="primary", elem_id=f"{key}-run")
                outputs, function = _outputs(gr, served, key)
            if served.task == "translation":
                with gr.Column():
                    gr.Markdown(HEATMAP_CAPTION)
                    heatmap = gr.Image(type="pil", format="png", interactive=False, show_label=False,
                                       elem_id=f"{key}-heatmap")
                    outputs.append(heatmap)
        if tab.examples[1:]:
            gr.Examples([[example] for example in tab.examples], inputs=[text], label="More examples")
    button.click(function, inputs=[text], outputs=outputs, api_name=key, concurrency_limit=1, concurrency_id="models")


def _input_label(served: ServedModel) -> str:
    if served.task == "translation":
        return f"{language(served.direction[0])}: one sentence a line (at most {demo_tasks.MAX_SENTENCES})"
    return {"summarization": "Dialogue: one turn a line", "text-classification": "Review",
            "token-classification": "Text"}[served.task]


def _lines(served: ServedModel) -> int:
    return 6 if served.task == "summarization" else 3


def _button_label(served: ServedModel) -> str:
    return {"translation": "Translate", "summarization": "Summarize", "text-classification": "Classify",
            "token-classification": "Tag entities"}[served.task]


def _outputs(gr, served: ServedModel, key: str):
    """The components that show the answer, and the function that fills them."""
    if served.task == "translation":
        output = gr.Textbox(label=language(served.direction[1]), lines=3, interactive=False, elem_id=f"{key}-output")
        return [output], _translate(served)
    if served.task == "summarization":
        output = gr.Textbox(label="Summary", lines=2, interactive=False, elem_id=f"{key}-output")
        return [output], _summarize(served)
    if served.task == "text-classification":
        output = gr.Label(label="Label", elem_id=f"{key}-output")
        return [output], _classify(served)
    highlighted = gr.HighlightedText(label="Entities", elem_id=f"{key}-output")
    with gr.Accordion("The pipeline's output (label, score, span)", open=False):
        entities = gr.JSON(label="Entities", elem_id=f"{key}-entities")
    return [highlighted, entities], _tag(served)


# The largest request body the server reads: a text of MAX_CHARACTERS, JSON-escaped (at most 6 bytes a character,
# `\uXXXX`), with room to spare. The page uploads no files. A longer body is answered 413 before it is read: a
# 100 MB request was read into memory whole before the length of its text was checked.
MAX_REQUEST_BYTES = 2**20


class RequestSizeLimit:
    """ASGI middleware: a request whose body is longer than `limit` bytes (by its Content-Length, or as it streams
    in) gets 413 Request Entity Too Large, without its body being read (or the rest of it)."""

    def __init__(self, app, limit: int = MAX_REQUEST_BYTES):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > self.limit):
            return await self._refuse(send)
        received, started = 0, False

        async def bounded_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge()
            return message

        async def noting_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded_receive, noting_send)
        except _TooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send):
        body = (f"The request is larger than the {self.limit:,} bytes this demo reads; a text takes at most "
                f"{demo_tasks.MAX_CHARACTERS:,} characters.").encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


def import_gradio():
    try:
        import gradio
    except ImportError:
        raise ImportError(
            "The web demo needs gradio, which is not installed: pip install 'vaswani-transformer[demo]'."
        ) from None
    return gradio


def build_app(tabs: list[Tab], title: str = "vaswani: the original Transformer"):
    """The page (a gr.Blocks, not yet launched) with its queue."""
    gr = import_gradio()
    with gr.Blocks(title=title, analytics_enabled=False) as app:
        gr.Markdown(INTRO)
        with gr.Tabs():
            for tab in tabs:
                _add_tab(gr, tab)
    return app.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)


# --- the command line ------------------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Serve models of this project in a web page (Gradio), a tab per model: the five the repository "
        "ships, or one model of your own."
    )
    parser.add_argument(
        "--model", default=None,
        help="A model folder of this project to serve, its task read from its config (translation, "
        "summarization, text-classification, token-classification). Default: the five models the repository ships "
        f"({SHIPPED_RESULTS.relative_to(REPO)}/*/model).",
    )
    parser.add_argument(
        "--host", default=os.environ.get("GRADIO_SERVER_NAME") or DEFAULT_HOST,
        help=f"The address to listen on (default: Gradio's GRADIO_SERVER_NAME, which a Space sets to 0.0.0.0, else "
        f"{DEFAULT_HOST}: this machine only; 0.0.0.0: every address).",
    )
    parser.add_argument("--port", type=int, default=None,
                        help=f"The port (default: Gradio's GRADIO_SERVER_PORT, else {DEFAULT_PORT}).")
    args = parser.parse_args(argv)
    if args.port is None:
        args.port = _port_from_environment()
    check_option("port", args.port, PORT)
    return args


def _port_from_environment() -> int:
    value = os.environ.get("GRADIO_SERVER_PORT") or str(DEFAULT_PORT)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"GRADIO_SERVER_PORT={value!r} is not a port number: set it to one, or give --port.") from None


def shipped_folders() -> list[tuple[Path, Shipped]]:
    folders = [(SHIPPED_RESULTS / shipped.name / "model", shipped) for shipped in SHIPPED]
    missing = [str(folder) for folder, _ in folders if not folder.is_dir()]
    if missing:
        raise FileNotFoundError(
            f"The shipped models are not here ({', '.join(missing)}): they come with a clone of the repository. "
            "Serve a model of your own with --model DIR."
        )
    return folders


def load_tabs(model: str | None) -> list[Tab]:
    """The tabs: the model `model` (checked before anything is loaded), or every shipped model."""
    if model is not None:
        folder = Path(model)
        served = demo_tasks.load_model(folder)
        return [Tab(served, describe(served, folder.name), examples_for(served))]
    tabs = []
    for folder, shipped in shipped_folders():
        served = demo_tasks.load_model(folder)
        tabs.append(Tab(served, f"{shipped.about}  \n{describe(served, str(folder.relative_to(REPO)))}",
                        examples_for(served)))
    return tabs


def main(argv: list[str] | None = None) -> None:
    """Check the options and the model, load the models, and serve the page until stopped (Ctrl-C)."""
    args = parse_arguments(argv)
    if args.model is not None:  # a folder that is not a model of this project: one line, before any loading
        read_task(Path(args.model))
    else:
        shipped_folders()
    import_gradio()
    tabs = load_tabs(args.model)
    app = build_app(tabs)
    app.launch(server_name=args.host, server_port=args.port, show_error=False, app_kwargs=_limited_requests())


def _limited_requests() -> dict:
    """The keyword arguments of Gradio's server (FastAPI) that put `RequestSizeLimit` in front of every route."""
    from starlette.middleware import Middleware

    return {"middleware": [Middleware(RequestSizeLimit, limit=MAX_REQUEST_BYTES)]}


def console_main() -> None:
    """The `vaswani-app` command."""
    run_command(main)


__all__ = [
    "console_main",
    "DEFAULT_PORT", "EXAMPLES", "MAX_REQUEST_BYTES", "QUEUE_SIZE", "SHIPPED", "RequestSizeLimit", "Tab", "build_app",
    "load_tabs", "main",
]
