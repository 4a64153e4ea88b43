"""The code every saved model of this project carries, one flat folder of it: `save_pretrained` copies each file here
but this one into the folder it writes (`modeling_vaswani.code_files_to_ship`), where `trust_remote_code=True` loads
it without this package. So the files import only each other, relatively, besides the standard library, torch,
transformers and tokenizers. scripts/tools/refresh_shipped_code.py copies them into the models under results/."""
