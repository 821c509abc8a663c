"""On-device training: fine-tune a model's last layers on the device's own data."""
from .finetune import finetune

__all__ = ["finetune"]
